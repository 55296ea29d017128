"""How the config states the trainer's ranks, and what it refuses (docs/fsdp.md).

Refusals come from validation (config/trainer_rules.py), as in `trivium plan` and `trivium run`."""

from __future__ import annotations

import pytest

from trivium.config import load_config_from_dict, resolve, validate
from trivium.errors import UserError
from trivium.runtime.settings import build_run_settings


def run_settings(tmp_path, **trainer):
    data = {
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": "/models/m", "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 0, **trainer.pop("cluster", {})},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {"batch_size": 2, "total_steps": 3, "explorer_input": {"taskset": {"name": "t", "path": "/data/t"}}},
        "trainer": trainer,
        "synchronizer": trainer.pop("synchronizer", {}),
    }
    resolved = resolve(load_config_from_dict(data))
    validate(resolved)
    return build_run_settings(resolved)


def test_a_cpu_machine_trains_on_one_rank_unless_told_otherwise(tmp_path):
    assert run_settings(tmp_path).trainer.data_parallel_size == 1
    two = run_settings(tmp_path, data_parallel_size=2).trainer
    assert two.data_parallel_size == 2 and two.strategy == "fsdp2"
    assert run_settings(tmp_path, trainer_strategy="fsdp", data_parallel_size=2).trainer.strategy == "fsdp2"


def test_strategy_none_allows_one_rank_only(tmp_path):
    assert run_settings(tmp_path, trainer_strategy="none").trainer.strategy is None
    with pytest.raises(UserError, match="trainer_strategy is 'none'"):
        run_settings(tmp_path, trainer_strategy="none", data_parallel_size=2)


def test_several_ranks_under_ray_placement_are_accepted(tmp_path):
    settings = run_settings(tmp_path, data_parallel_size=2, cluster={"placement": "ray"})
    assert settings.placement.uses_ray and settings.trainer.data_parallel_size == 2


def test_offload_on_a_cpu_is_refused_by_name(tmp_path):
    with pytest.raises(UserError, match="trainer.param_offload"):
        run_settings(tmp_path, param_offload=True)
    with pytest.raises(UserError, match="trainer.optimizer_offload"):
        run_settings(tmp_path, optimizer_offload=True)


def test_verl_offload_setting_is_read_as_the_trainer_key(tmp_path):
    verl = {"actor_rollout_ref": {"actor": {"fsdp_config": {"param_offload": True}}}}
    with pytest.raises(UserError, match="trainer.param_offload"):
        run_settings(tmp_path, trainer_config=verl)


def test_gradient_checkpointing_over_several_ranks_is_accepted(tmp_path):
    trainer = run_settings(tmp_path, data_parallel_size=2, enable_gradient_checkpointing=True).trainer
    assert (trainer.data_parallel_size, trainer.gradient_checkpointing) == (2, True)


def test_lora_over_several_ranks_is_accepted(tmp_path):
    data = {
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": "/models/m", "max_prompt_tokens": 16, "max_response_tokens": 8,
                  "lora_configs": [{"lora_rank": 4, "lora_alpha": 8}]},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {"batch_size": 2, "total_steps": 3},
        "trainer": {"data_parallel_size": 2},
    }
    trainer = build_run_settings(resolve(load_config_from_dict(data))).trainer
    assert (trainer.data_parallel_size, trainer.strategy, trainer.lora.rank) == (2, "fsdp2", 4)


def test_ddp_keeps_its_name_and_refuses_offload(tmp_path):
    assert run_settings(tmp_path, trainer_strategy="ddp", data_parallel_size=2).trainer.strategy == "ddp"
    gpus = {"gpu_per_node": 3, "trainer_gpu_num": 2}
    assert run_settings(tmp_path, trainer_strategy="fsdp2", data_parallel_size=2, param_offload=True, cluster=gpus)
    with pytest.raises(UserError, match="trainer_strategy 'ddp' keeps whole models"):
        run_settings(tmp_path, trainer_strategy="ddp", data_parallel_size=2, param_offload=True, cluster=gpus)


def test_the_ranks_wait_for_each_other_as_long_as_a_sync_may_take(tmp_path):
    """A collective, or a rank's silence, ends the run after synchronizer.sync_timeout (docs/fsdp.md)."""
    assert run_settings(tmp_path, data_parallel_size=2).trainer.collective_timeout == 1200
    trainer = run_settings(tmp_path, data_parallel_size=2, synchronizer={"sync_timeout": 45}).trainer
    assert trainer.collective_timeout == 45
