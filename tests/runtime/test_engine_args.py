"""Which rollout-model keys and placement each engine backend receives from the config."""

import pytest

from trivium.config.load import load_config_from_dict
from trivium.config.resolve import resolve
from trivium.errors import UserError
from trivium.runtime.builders import _backend_engine_args


def resolved(mode: str, gpus: int, **rollout) -> object:
    config = load_config_from_dict(
        {
            "mode": mode,
            "model": {"model_path": "/m", "max_model_len": 64},
            "cluster": {"gpu_per_node": gpus},
            "explorer": {"rollout_model": rollout},
        }
    )
    return resolve(config)


def test_vllm_gets_every_rollout_model_key_and_sleeps_only_in_colocate_on_a_gpu():
    config = resolved("colocate", 1, engine_type="vllm", gpu_memory_utilization=0.4, enforce_eager=True)
    assert _backend_engine_args(config, config.explorer.rollout_model, 0) == {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.4,
        "enforce_eager": True,
        "enable_sleep_mode": True,
    }
    config = resolved("both", 4, engine_type="vllm", tensor_parallel_size=2)
    args = _backend_engine_args(config, config.explorer.rollout_model, 0)
    assert args["tensor_parallel_size"] == 2 and args["enable_sleep_mode"] is False
    config = resolved("colocate", 0, engine_type="hf")
    config.explorer.rollout_model.engine_type = "vllm"  # CPU: no sleep mode to ask for
    assert _backend_engine_args(config, config.explorer.rollout_model, 0)["enable_sleep_mode"] is False


def test_the_hf_engine_follows_the_placement():
    config = resolved("colocate", 0, engine_type="hf")
    assert _backend_engine_args(config, config.explorer.rollout_model, 0) == {"device": "cpu"}
    config = resolved("colocate", 1, engine_type="hf")
    assert _backend_engine_args(config, config.explorer.rollout_model, 0) == {"device": "cuda"}
    # both on 3 GPUs, two engines: the trainer takes GPU 0, the engines GPUs 1 and 2.
    config = resolved("both", 3, engine_type="hf", engine_num=2)
    assert [_backend_engine_args(config, config.explorer.rollout_model, i)["device"] for i in (0, 1)] == [
        "cuda:1",
        "cuda:2",
    ]


def test_the_hf_engine_refuses_tensor_parallelism():
    config = resolved("both", 4, engine_type="hf", tensor_parallel_size=2)
    with pytest.raises(UserError, match="explorer.rollout_model.tensor_parallel_size"):
        _backend_engine_args(config, config.explorer.rollout_model, 0)
