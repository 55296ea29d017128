"""Every example config from the specification loads, resolves and validates; key values check out."""

from __future__ import annotations

import pytest

from tests.config.conftest import FIXTURES
from trivium.config.errors import ConfigError
from trivium.config.load import load_config
from trivium.config.plan import explain
from trivium.config.prepare import prepare
from trivium.config.resolve import resolve

ALL = sorted(path.name for path in FIXTURES.glob("*.yaml"))


# The reference's PPO example gives its reward model two engines; an auxiliary model runs one.
REFUSED = {"seed002_ppo.yaml": ["explorer.auxiliary_models[0].engine_num: is 2"]}


@pytest.mark.parametrize("name", ALL)
def test_fixture_prepares_and_plans(seed_env, name):
    if name in REFUSED:
        with pytest.raises(ConfigError) as refused:
            prepare(FIXTURES / name)
        assert len(refused.value.problems) == len(REFUSED[name])
        assert all(words in str(refused.value) for words in REFUSED[name])
        return
    stages = prepare(FIXTURES / name)
    for stage in stages:
        assert stage.config.checkpoint_job_dir
        assert explain(stage.config).render()


def test_grpo_example_arithmetic(seed_env):
    (stage,) = prepare(FIXTURES / "seed002_grpo.yaml")
    config = stage.config
    assert config.model.model_path == "deepseek-ai/deepseek-llm-7b-chat"
    assert config.model.max_model_len == 1024  # 512 prompt + 512 response
    assert (config.cluster.explorer_devices, config.cluster.trainer_devices) == (2, 6)
    assert config.synchronizer.sync_method == "nccl"
    assert config.explorer.eval_interval == 4  # 5 rounded to a multiple of sync_interval 4
    assert config.algorithm.kl_loss_fn == "low_var_kl" and config.algorithm.advantage_fn == "grpo"
    assert config.algorithm.policy_loss_fn == "ppo"  # from the preset
    assert config.buffer.explorer_input.tasksets[0].path == f"{seed_env['HOME']}/data/gsm8k"
    assert config.buffer.explorer_input.tasksets[0].repeat_times == 8
    assert config.buffer.explorer_input.eval_tasksets[0].repeat_times == 1
    assert config.trainer.trainer_config["actor_rollout_ref"]["ref"]["fsdp_config"]["param_offload"] is True
    keys = {(note.key, note.kind) for note in stage.notes}
    assert ("buffer.train_batch_size", "suggestion") in keys  # 2048 over 6 trainer GPUs
    assert ("explorer.eval_interval", "suggestion") in keys
    assert "256 tasks × 8 repeats = 2,048 experiences per step" in explain(config).render()


def test_ppo_example_devices_and_critic(seed_env):
    config = resolve(load_config(FIXTURES / "seed002_ppo.yaml"))  # loads and resolves; refused by validate
    assert (config.cluster.explorer_devices, config.cluster.auxiliary_devices, config.cluster.trainer_devices) == (2, 2, 4)
    assert config.model.critic_model_path == f"{seed_env['HOME']}/models/Qwen2-7B-Instruct"
    assert config.algorithm.kl_loss_fn == "none" and config.algorithm.optimizer.lr_warmup_steps_ratio == 0.1
    assert [t.name for t in config.buffer.explorer_input.tasksets] == ["gsm8k", "math"]
    assert config.buffer.explorer_input.tasksets[1].rollout_args["temperature"] == 1.0
    assert config.trainer.trainer_config["critic"]["optim"]["lr"] == 1e-5
    assert config.monitor.monitor_type == "wandb"


def test_reference_example_every_section(seed_env):
    config = resolve(load_config(FIXTURES / "seed001_reference.yaml"))
    assert config.model.model_path == seed_env["MODEL_PATH"] == config.model.critic_model_path
    assert config.trainer.trainer_type == "default"  # 'verl' alias
    assert config.buffer.trainer_input.auxiliary_buffers["sft_dataset"].path == seed_env["TRIVIUM_SFT_DATASET_PATH"]
    assert config.buffer.trainer_input.experience_buffer.replay_buffer.enable is True
    assert config.service.data_juicer.port == 5005
    assert config.data_processor.experience_pipeline.operators[1].name == "reward_shaping_mapper"
    assert config.buffer.explorer_input.eval_tasksets[0].rollout_args["temperature"] == 0.1
    assert config.buffer.explorer_input.tasksets[0].default_reward_fn_type == "countdown_reward"
    assert config.explorer.auxiliary_models[0].model_path == "/models/judge"  # env default used
    assert config.ray_namespace == "trivium-demo/countdown"


def test_passthrough_section_reads_upper_keys(seed_env):
    (stage,) = prepare(FIXTURES / "seed000_passthrough.yaml")
    assert stage.config.algorithm.repeat_times == 4
    assert stage.config.model.model_path == seed_env["MODEL_PATH"]


def test_stage_example_expands_in_order(seed_env):
    first, second = prepare(FIXTURES / "seed001_stages.yaml")
    assert (first.config.name, second.config.name) == ("staged/sft_warmup", "staged/rft")
    assert first.config.mode == "train" and first.config.algorithm.algorithm_type == "sft"
    assert first.config.trainer.total_steps == 100 and first.config.synchronizer.sync_method == "checkpoint"
    assert second.config.algorithm.algorithm_type == "grpo" and second.config.mode == "both"
    assert second.config.previous_stage_job_dir == first.config.checkpoint_job_dir


def test_env_vars_used_by_fixtures_are_trivium_prefixed():
    import re

    names = set()
    for path in FIXTURES.glob("*.yaml"):
        names |= set(re.findall(r"oc\.env:([A-Z_]+)", path.read_text()))
    assert names <= {"HOME", "MODEL_PATH"} | {n for n in names if n.startswith("TRIVIUM_")}


def test_unresolved_load_keeps_derived_fields_empty(seed_env):
    config = load_config(FIXTURES / "seed002_grpo.yaml")
    assert config.cluster.trainer_devices is None and config.checkpoint_job_dir is None


def test_reference_example_notes_what_data_juicer_calls(seed_env):
    # Its Data-Juicer scorer calls a model over an OpenAI-compatible API and it names a Data-Juicer
    # server: both plan, with notes saying where the model is called and that no server is used.
    (stage,) = prepare(FIXTURES / "seed001_reference.yaml")
    notes = {note.key: note.message for note in stage.notes}
    assert "'llm_difficulty_score_filter' calls the model" in notes["data_processor.task_pipeline.operators[0]"]
    assert "no Data-Juicer server is started or contacted" in notes["service.data_juicer"]
