"""The plan's arithmetic (supply vs demand) and the memory estimate behind a suggestion."""

from __future__ import annotations

import json

from tests.config.conftest import patched
from trivium.config.load import load_config_from_dict
from trivium.config.memory import estimate_parameters, memory_suggestions
from trivium.config.plan import explain
from trivium.config.resolve import resolve


def planned(patch: dict):
    return explain(resolve(load_config_from_dict(patched(patch))))


def test_unbalanced_run_from_the_tuning_guide():
    # 89 explorer steps x 8 tasks x 4 repeats vs trainer batches of 264.
    plan = planned({"buffer": {"batch_size": 8, "total_steps": 89, "train_batch_size": 264}})
    assert (plan.explorer_steps, plan.trainer_steps) == (89, 10)  # 2,848 // 264 = 10
    assert (plan.total_supply, plan.total_demand) == (2848, 2640)
    text = plan.render()
    assert "explorer 89 steps × 8 tasks × 4 repeats = 2,848 samples; trainer 10 steps × 264 = 2,640 samples" in text
    assert "explorer supplies 32 experiences per step, trainer takes 264" in text
    assert "Set buffer.train_batch_size: 32" in text
    assert "208 more samples than the trainer uses" in text
    # The explorer stops once it has made what the trainer uses: ceil(2,640 / 32) = 83 steps.
    assert "the explorer stops after 83 steps, the last whose samples the trainer's 10 steps use" in text


def test_balanced_run_has_no_warnings():
    plan = planned({"buffer": {"batch_size": 8, "total_steps": 10}, "synchronizer": {"sync_interval": 2}})
    assert plan.warnings == []
    text = plan.render()
    assert "8 tasks × 4 repeats = 32 experiences per step" in text
    assert "per sync interval (2 steps): explorer 2 × 32 = 64 experiences; trainer 2 × 32 = 64 experiences" in text


def test_trainer_starved_when_its_steps_are_fixed():
    plan = planned({"buffer": {"total_steps": 10}, "trainer": {"total_steps": 12}})
    assert plan.total_supply == 80 and plan.total_demand == 96
    assert any("lower trainer.total_steps to 10" in warning for warning in plan.warnings)


def test_explorer_steps_follow_a_fixed_trainer_length():
    plan = planned({"trainer": {"total_steps": 5}, "buffer": {"train_batch_size": 12}})
    assert plan.explorer_steps == 8  # ceil(5 * 12 / 8)


def test_device_lines():
    text = planned({"cluster": {"gpu_per_node": 8}, "explorer": {"rollout_model": {"tensor_parallel_size": 2},
                    "auxiliary_models": [{"model_path": "/judge", "engine_num": 2}]}}).render()
    assert "8 GPU(s) = 1 node(s) × 8" in text
    assert "explorer: 2 = 1 engine(s) × 2 tensor-parallel (hf)" in text
    assert "auxiliary model 0 (/judge): 2 = 2 engine(s) × 1 tensor-parallel" in text
    assert "trainer: 4 (the rest)" in text
    assert "explorer and trainer share the CPU" in planned({}).render()


def test_train_mode_plan_has_no_explorer():
    plan = planned({"mode": "train", "algorithm": {"algorithm_type": "sft", "repeat_times": 1},
                    "buffer": {"total_steps": 3, "trainer_input": {"experience_buffer": {"storage_type": "file", "path": "/d"}}}})
    text = plan.render()
    assert "explorer" not in text.split("per step:")[1] and "trainer 3 steps × 2 = 6 samples" in text


def _write_model_config(path, **spec):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(spec))


def test_parameter_estimate_by_hand(tmp_path):
    _write_model_config(tmp_path / "m", hidden_size=4, num_hidden_layers=2, vocab_size=10, intermediate_size=8,
                        tie_word_embeddings=True)
    # per layer 4*4*4 + 3*4*8 = 160; 2 layers = 320; tied embedding 10*4 = 40
    assert estimate_parameters(str(tmp_path / "m")) == 360
    assert estimate_parameters(str(tmp_path / "absent")) is None


def test_memory_suggestion_for_a_model_too_big_for_its_engine(tmp_path):
    # ~7.2e9 parameters (bfloat16: ~13 GiB) on a 16 GiB device at 0.6 utilization.
    _write_model_config(tmp_path / "big", hidden_size=4096, num_hidden_layers=32, vocab_size=32000,
                        intermediate_size=11008)
    config = resolve(load_config_from_dict(patched({
        "model": {"model_path": str(tmp_path / "big"), "dtype": "bfloat16"}, "cluster": {"gpu_per_node": 2},
        "explorer": {"rollout_model": {"gpu_memory_utilization": 0.6}}})))
    advice = memory_suggestions(config, device_bytes=16 * 2**30)
    keys = {s.key for s in advice}
    assert "explorer.rollout_model.tensor_parallel_size" in keys
    assert "cluster" in keys  # ~100 GiB of training state on one 16 GiB trainer GPU
    assert memory_suggestions(config, device_bytes=640 * 2**30) == []


def test_trainer_ranks_line_names_the_layout_and_where_the_ranks_run():
    assert "trainer ranks: 1 (no data parallelism)" in planned({}).render()
    sharded = planned({"trainer": {"data_parallel_size": 2}}).render()
    assert ("trainer ranks: 2 over gloo (FSDP2, the models sharded over the ranks); rank 0 in this process, "
            "rank 1 in a process it starts") in sharded
    replicated = planned({"trainer": {"data_parallel_size": 4, "trainer_strategy": "ddp"},
                          "cluster": {"placement": "ray"}}).render()
    assert "trainer ranks: 4 over gloo (the whole models on every rank, gradients all-reduced)" in replicated
    assert "ranks 1-3 as Ray actors beside it" in replicated
