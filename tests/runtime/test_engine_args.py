"""Which rollout-model keys and placement each engine backend receives from the config."""

import pytest

from trivium.config.load import load_config_from_dict
from trivium.config.resolve import resolve
from trivium.errors import UserError
from trivium.runtime.explorer_settings import rollout_engine_settings


def engine_kwargs(mode: str, gpus: int, index: int = 0, placement: str = "process", **rollout) -> dict:
    config = load_config_from_dict(
        {
            "mode": mode,
            "model": {"model_path": "/m", "max_model_len": 64},
            "cluster": {"gpu_per_node": gpus, "placement": placement},
            "explorer": {"rollout_model": rollout},
        }
    )
    return rollout_engine_settings(resolve(config)).factory_kwargs(index)


def test_vllm_gets_every_rollout_model_key_and_sleeps_only_in_colocate_on_a_gpu():
    kwargs = engine_kwargs("colocate", 1, engine_type="vllm", gpu_memory_utilization=0.4, enforce_eager=True)
    assert {key: kwargs[key] for key in ("tensor_parallel_size", "gpu_memory_utilization", "enforce_eager",
                                         "enable_sleep_mode")} == {
        "tensor_parallel_size": 1, "gpu_memory_utilization": 0.4, "enforce_eager": True, "enable_sleep_mode": True,
    }
    kwargs = engine_kwargs("both", 4, engine_type="vllm", tensor_parallel_size=2)
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["enable_sleep_mode"] is False
    assert engine_kwargs("colocate", 0, engine_type="vllm")["enable_sleep_mode"] is False  # CPU: nothing to sleep


def test_the_hf_engine_follows_the_placement():
    assert engine_kwargs("colocate", 0, engine_type="hf")["device"] == "cpu"
    assert engine_kwargs("colocate", 1, engine_type="hf")["device"] == "cuda"
    # both on 3 GPUs in one process, two engines: the trainer takes GPU 0, the engines GPUs 1 and 2.
    assert [engine_kwargs("both", 3, i, engine_type="hf", engine_num=2)["device"] for i in (0, 1)] == [
        "cuda:1", "cuda:2",
    ]
    # On Ray each engine actor sees only its own GPU.
    assert engine_kwargs("both", 3, 1, placement="ray", engine_type="hf", engine_num=2)["device"] == "cuda"


def test_the_hf_engine_refuses_tensor_parallelism():
    with pytest.raises(UserError, match="explorer.rollout_model.tensor_parallel_size"):
        engine_kwargs("both", 4, engine_type="hf", tensor_parallel_size=2)
