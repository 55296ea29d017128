"""resolve(): each derived value, computed by hand for small configs."""

from __future__ import annotations

import json

import pytest

from tests.config.conftest import patched
from trivium.config.errors import ConfigError
from trivium.config.load import load_config_from_dict
from trivium.config.resolve import resolve, resolve_with_notes
from trivium.config.validate import validate


def resolved(patch: dict | None = None):
    return resolve(load_config_from_dict(patched(patch or {})))


def test_train_batch_size_and_preset_functions():
    config = resolved({"buffer": {"batch_size": 6}})
    assert config.buffer.train_batch_size == 24  # 6 tasks x 4 repeats
    algorithm = config.algorithm
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn) == ("grpo", "ppo", "k2")
    assert (algorithm.sample_strategy, algorithm.loss_agg_mode) == ("default", "token-mean")
    explicit = resolved({"buffer": {"train_batch_size": 10}, "algorithm": {"kl_loss_fn": "none"}})
    assert explicit.buffer.train_batch_size == 10 and explicit.algorithm.kl_loss_fn == "none"


def test_dpo_forces_two_responses():
    config, notes = resolve_with_notes(load_config_from_dict(patched({
        "mode": "train", "algorithm": {"algorithm_type": "dpo", "repeat_times": 1}, "buffer": {"batch_size": 3}})))
    assert config.algorithm.repeat_times == 2 and config.buffer.train_batch_size == 6
    assert any(note.key == "algorithm.repeat_times" for note in notes)


def test_tasksets_get_their_derived_settings():
    config = resolved({
        "model": {"temperature": 0.7, "top_k": 20},
        "buffer": {"explorer_input": {
            "default_workflow_type": "math_workflow", "default_eval_workflow_type": "eval_workflow",
            "default_reward_fn_type": "math_reward",
            "taskset": {"rollout_args": {"temperature": 1.2}},
            "eval_tasksets": [{"name": "e", "path": "/e"}, {"name": "f", "path": "/f", "repeat_times": 16,
                                                               "default_workflow_type": "own"}],
        }},
    })
    explorer_input = config.buffer.explorer_input
    (train,) = explorer_input.tasksets
    assert explorer_input.taskset == train  # the single spelling stays readable
    assert train.repeat_times == 4 and not train.is_eval
    assert train.default_workflow_type == "math_workflow" and train.default_reward_fn_type == "math_reward"
    assert train.rollout_args == {"temperature": 1.2, "top_p": 1.0, "top_k": 20}
    first, second = explorer_input.eval_tasksets
    assert (first.repeat_times, first.is_eval, first.default_workflow_type) == (1, True, "eval_workflow")
    assert (second.repeat_times, second.default_workflow_type) == (16, "own")
    assert first.rollout_args["temperature"] == 0.7
    assert train.task_selector.seed == 42


def test_datasets_read_by_the_trainer_shuffle_with_the_global_seed():
    config = resolved({"seed": 7, "buffer": {"trainer_input": {
        "experience_buffer": {"name": "sft", "storage_type": "file", "path": "/sft"},
        "auxiliary_buffers": {"expert": {"storage_type": "file", "path": "/x"},
                              "pinned": {"storage_type": "file", "path": "/y", "task_selector": {"seed": 3}}},
    }}})
    trainer_input = config.buffer.trainer_input
    assert trainer_input.experience_buffer.task_selector.seed == 7
    assert trainer_input.auxiliary_buffers["expert"].task_selector.seed == 7
    assert trainer_input.auxiliary_buffers["pinned"].task_selector.seed == 3


@pytest.mark.parametrize(
    "model, expected",
    [
        ({"max_model_len": None, "max_prompt_tokens": 100, "max_response_tokens": 28}, (128, 100, 28)),
        ({"max_model_len": 512, "max_prompt_tokens": 100, "max_response_tokens": None}, (512, 100, 412)),
        ({"max_model_len": 512, "max_prompt_tokens": None, "max_response_tokens": 12}, (512, 500, 12)),
        ({"max_model_len": 512, "max_prompt_tokens": None, "max_response_tokens": None}, (512, None, None)),
        ({"max_model_len": 10000, "max_prompt_tokens": None, "max_response_tokens": 100}, (10000, 9900, 100)),
    ],
)
def test_token_limits(model, expected):
    config = resolved({"model": model})
    assert (config.model.max_model_len, config.model.max_prompt_tokens, config.model.max_response_tokens) == expected
    assert config.explorer.rollout_model.max_model_len == expected[0]
    assert config.trainer.max_token_len_per_gpu == max(16384, 2 * expected[0])


@pytest.mark.parametrize(
    "patch, split",
    [
        ({"cluster": {"gpu_per_node": 8}, "explorer": {"rollout_model": {"engine_num": 2, "tensor_parallel_size": 2},
                                                       "auxiliary_models": [{"model_path": "/j", "engine_num": 1}]}},
         ("cuda", 4, 1, 3, False)),
        ({"cluster": {"node_num": 2, "gpu_per_node": 4}, "explorer": {"rollout_model": {"engine_num": 3}}},
         ("cuda", 3, 0, 5, False)),
        ({"cluster": {"gpu_per_node": 0}}, ("cpu", 0, 0, 0, True)),
        ({"mode": "colocate", "cluster": {"gpu_per_node": 1}}, ("cuda", 1, 0, 1, True)),
        ({"mode": "explore", "cluster": {"gpu_per_node": 4}, "explorer": {"rollout_model": {"engine_num": 4}}},
         ("cuda", 4, 0, 0, False)),
        ({"mode": "train", "algorithm": {"algorithm_type": "sft", "repeat_times": 1}, "cluster": {"gpu_per_node": 4},
          "buffer": {"trainer_input": {"experience_buffer": {"storage_type": "file", "path": "/d"}}}},
         ("cuda", 0, 0, 4, False)),
    ],
    ids=["both-8", "two-nodes", "cpu", "colocate", "explore", "train"],
)
def test_device_split(patch, split):
    cluster = resolved(patch).cluster
    assert (cluster.device_type, cluster.explorer_devices, cluster.auxiliary_devices,
            cluster.trainer_devices, cluster.shared_devices) == split


@pytest.mark.parametrize(
    "patch, method, noted",
    [
        ({"cluster": {"gpu_per_node": 4}}, "nccl", False),
        ({}, "memory", False),  # both on CPU: one process
        ({"synchronizer": {"sync_method": "nccl"}}, "memory", True),  # no GPU: downgraded with a note
        ({"mode": "colocate", "cluster": {"gpu_per_node": 1}}, "memory", False),
        ({"mode": "explore"}, "checkpoint", False),
        # One side only: nothing to broadcast to, so weights travel as checkpoints (with a note).
        ({"mode": "explore", "synchronizer": {"sync_method": "nccl"}}, "checkpoint", True),
        ({"mode": "bench", "synchronizer": {"sync_method": "memory"}}, "checkpoint", True),
        ({"cluster": {"gpu_per_node": 4}, "synchronizer": {"sync_method": "checkpoint"}}, "checkpoint", False),
    ],
)
def test_sync_method_rules(patch, method, noted):
    config, notes = resolve_with_notes(load_config_from_dict(patched(patch)))
    assert config.synchronizer.sync_method == method
    assert any(note.key == "synchronizer.sync_method" for note in notes) is noted


@pytest.mark.parametrize("eval_interval, sync_interval, expected", [(5, 4, 4), (7, 4, 8), (1, 4, 4), (12, 4, 12), (10, 1, 10)])
def test_eval_interval_rounds_to_sync_multiples(eval_interval, sync_interval, expected):
    config, notes = resolve_with_notes(load_config_from_dict(patched(
        {"explorer": {"eval_interval": eval_interval}, "synchronizer": {"sync_interval": sync_interval}})))
    assert config.explorer.eval_interval == expected
    assert any(note.key == "explorer.eval_interval" for note in notes) is (eval_interval != expected)


def test_total_steps_from_epochs_and_a_local_taskset(tmp_path):
    data = tmp_path / "tasks"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"q": i}) + "\n" for i in range(50)))
    (data / "test.jsonl").write_text(json.dumps({"q": 0}) + "\n")
    config = resolved({"buffer": {"batch_size": 4, "total_epochs": 3, "train_batch_size": 8,
                                  "explorer_input": {"taskset": {"path": str(data)}}}})
    # explorer: 3 epochs * 50 rows // 4 = 37 steps -> 37 * 4 * 4 = 592 experiences // 8 = 74 trainer steps
    assert config.trainer.total_steps == 74
    assert resolved({"buffer": {"total_steps": 9}}).trainer.total_steps == 9
    assert resolved().trainer.total_steps is None  # /data/tasks is not readable here


def test_train_mode_steps_count_the_dataset(tmp_path):
    (tmp_path / "sft.jsonl").write_text("".join("{}\n" for _ in range(100)))
    config = resolved({"mode": "train", "algorithm": {"algorithm_type": "sft", "repeat_times": 1},
                       "buffer": {"batch_size": 8, "total_epochs": 2, "trainer_input": {
                           "experience_buffer": {"storage_type": "file", "path": str(tmp_path / "sft.jsonl")}}}})
    assert config.trainer.total_steps == 25  # 2 epochs * 100 rows // 8


def test_names_namespace_and_experience_buffer(tmp_path):
    config = resolved({"checkpoint_root_dir": str(tmp_path)})
    assert config.ray_namespace == "demo/unit"
    assert config.checkpoint_job_dir == str(tmp_path / "demo" / "unit")
    buffer = config.buffer.trainer_input.experience_buffer
    assert (buffer.name, buffer.storage_type) == ("experience_buffer", "queue")
    assert config.explorer.rollout_model.model_path == "/models/tiny" and config.explorer.rollout_model.seed == 42


def test_verl_trainer_alias_is_noted():
    config, notes = resolve_with_notes(load_config_from_dict(patched({"trainer": {"trainer_type": "verl"}})))
    assert config.trainer.trainer_type == "default"
    assert any(note.key == "trainer.trainer_type" for note in notes)


def test_optimizer_clip_grad_is_the_trainer_grad_clip():
    config, notes = resolve_with_notes(load_config_from_dict(patched({"algorithm": {"optimizer": {"clip_grad": 0.5}}})))
    assert config.trainer.grad_clip == 0.5
    assert any(n.key == "algorithm.optimizer.clip_grad" and "trainer.grad_clip = 0.5" in n.message for n in notes)
    assert resolved({"trainer": {"grad_clip": 0.3}}).trainer.grad_clip == 0.3
    with pytest.raises(ConfigError, match="0.5 disagrees with trainer.grad_clip 0.3"):
        resolved({"algorithm": {"optimizer": {"clip_grad": 0.5}}, "trainer": {"grad_clip": 0.3}})


def test_resolve_is_idempotent_and_does_not_mutate_its_input():
    loaded = load_config_from_dict(patched({"explorer": {"eval_interval": 5}, "synchronizer": {"sync_interval": 2},
                                            "cluster": {"gpu_per_node": 4}}))
    once = resolve(loaded)
    assert loaded.buffer.train_batch_size is None  # the input is untouched
    assert resolve(once) == once
    assert validate(once) == validate(resolve(once))


def test_suggestions_are_silenced_by_the_flag():
    noisy = resolved({"cluster": {"gpu_per_node": 8}, "explorer": {"rollout_model": {"engine_num": 2}},
                      "buffer": {"batch_size": 5}})  # 20 experiences over 6 trainer GPUs
    assert any(s.key == "buffer.train_batch_size" for s in validate(noisy))
    noisy.ignore_validator_suggestions = True
    assert validate(noisy) == []


def engine_note(notes) -> str:
    return next(note.message for note in notes if note.key == "explorer.rollout_model.engine_type")


def test_auto_engine_is_hf_without_a_gpu_and_says_why():
    config, notes = resolve_with_notes(load_config_from_dict(patched({"cluster": {"gpu_per_node": 0}})))
    assert config.explorer.rollout_model.engine_type == "hf"
    assert engine_note(notes) == "auto: hf, since the run has no GPU"


def test_auto_engine_is_vllm_on_gpus_with_vllm_installed_and_hf_without_it(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    on_gpus = load_config_from_dict(patched({"mode": "both", "cluster": {"gpu_per_node": 4}}))
    for installed, engine, why in ((True, "vllm", "since the run has GPUs and vLLM is installed"),
                                   (False, "hf", "since vLLM is not installed")):
        spec = object() if installed else None
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, spec=spec: spec if name == "vllm" else real_find_spec(name, *a))
        config, notes = resolve_with_notes(on_gpus)
        assert config.explorer.rollout_model.engine_type == engine
        assert engine_note(notes).startswith(f"auto: {engine}, {why}")


def test_an_engine_type_set_by_the_user_is_kept_without_a_note():
    config, notes = resolve_with_notes(load_config_from_dict(patched(
        {"mode": "both", "cluster": {"gpu_per_node": 4}, "explorer": {"rollout_model": {"engine_type": "hf"}}})))
    assert config.explorer.rollout_model.engine_type == "hf"
    assert not any(note.key == "explorer.rollout_model.engine_type" for note in notes)
