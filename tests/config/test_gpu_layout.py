"""The GPU layout: which machine and GPU each engine and trainer rank gets, and what is refused."""

from __future__ import annotations

import pytest

from tests.config.conftest import patched
from trivium.config.errors import ConfigError
from trivium.config.gpu_layout import build_layout, config_layout, layout_problems
from trivium.config.load import load_config_from_dict
from trivium.config.plan import explain
from trivium.config.resolve import resolve
from trivium.config.validate import validate


def resolved(cluster: dict, rollout: dict | None = None, **top):
    patch = {"cluster": {"placement": "ray", "compute_device": "cpu", **cluster}, **top}
    if rollout:
        patch["explorer"] = {"rollout_model": rollout}
    return resolve(load_config_from_dict(patched(patch)))


def test_engines_fill_the_first_machines_and_the_trainer_the_last():
    # 2 machines × 4 GPUs; 2 engines of 2 GPUs: GPUs 0-3 (machine 0), the trainer 4-7 (machine 1).
    layout = build_layout(node_num=2, gpu_per_node=4, rollout=(2, 2), auxiliary=[], trainer_gpus=4)
    assert [slot.gpus for slot in layout.engines] == [(0, 1), (2, 3)]
    assert layout.trainer_gpus == (4, 5, 6, 7) and layout.trainer_nodes == (1,)
    assert layout.trainer_gpus_per_node() == 4 and layout.bundle_indices("rollout") == "0,1;2,3"
    assert layout.nodes() == [
        (0, ["rollout_engine_0 (GPU 0,1)", "rollout_engine_1 (GPU 2,3)"]),
        (1, [f"trainer rank {r} (GPU {r})" for r in range(4)]),
    ]
    assert layout_problems(layout) == []


def test_an_auxiliary_model_follows_the_rollout_engines():
    layout = build_layout(node_num=1, gpu_per_node=4, rollout=(1, 1), auxiliary=[(1, 2)], trainer_gpus=1)
    assert layout.bundle_indices("auxiliary 0") == "1,2" and layout.trainer_gpus == (3,)


def test_an_engine_across_a_machine_boundary_is_a_problem():
    # 2 machines × 3 GPUs; engine 1 gets GPUs 2 and 3: machine 0 and machine 1.
    layout = build_layout(node_num=2, gpu_per_node=3, rollout=(2, 2), auxiliary=[], trainer_gpus=2)
    assert layout_problems(layout) == [
        "rollout_engine_1 would span machines 0 and 1: its GPUs 2-3 cross a machine boundary (every 3 GPUs); "
        "an engine's tensor-parallel ranks must share a machine: choose engine_num * tensor_parallel_size so "
        "that no engine straddles gpu_per_node"
    ]


def test_a_trainer_beyond_one_machine_must_take_whole_machines():
    # 2 machines × 4 GPUs, one engine: the trainer's 7 GPUs are one machine and three of another.
    layout = build_layout(node_num=2, gpu_per_node=4, rollout=(1, 1), auxiliary=[], trainer_gpus=7)
    (problem,) = layout_problems(layout)
    assert problem.startswith("the trainer gets GPUs 1-7 (7 = 8 in all - 1 of the engines)")


def test_resolve_fills_the_reference_placement_keys():
    config = resolved({"node_num": 3, "gpu_per_node": 2}, {"engine_num": 2}, mode="both")
    cluster = config.cluster
    assert (cluster.total_gpu_num, cluster.rollout_gpu_num, cluster.explorer_gpu_num) == (6, 2, 2)
    assert (cluster.trainer_gpu_num, cluster.trainer_node_num, cluster.trainer_gpu_num_per_node) == (4, 2, 2)
    assert config.explorer.rollout_model.bundle_indices == "0;1"
    assert cluster.compute_device == "cpu" and config.trainer.data_parallel_size == 4
    assert config_layout(config).trainer_nodes == (1, 2)
    validate(config)


def test_a_given_placement_key_must_agree_with_the_layout():
    config = resolved({"node_num": 2, "gpu_per_node": 2, "trainer_gpu_num": 3}, {"engine_num": 2})
    with pytest.raises(ConfigError, match=r"cluster.trainer_gpu_num: is 3 but this config's layout gives 2"):
        validate(config)


def test_cuda_visible_devices_is_refused_with_the_reason():
    config = resolved({"node_num": 1, "gpu_per_node": 2}, {"cuda_visible_devices": "1"})
    with pytest.raises(ConfigError, match="devices are assigned by the placement"):
        validate(config)


def test_rehearsing_gpus_on_the_cpu_needs_ray():
    config = resolved({"node_num": 1, "gpu_per_node": 2, "placement": "process"}, mode="both")
    with pytest.raises(ConfigError, match="cpu on a cluster with GPUs rehearses a Ray placement"):
        validate(config)


def test_compute_device_cuda_without_gpus_is_refused():
    config = resolved({"gpu_per_node": 0, "compute_device": "cuda"})
    with pytest.raises(ConfigError, match=r"is cuda but the cluster has no GPU"):
        validate(config)


def test_plan_prints_the_machines_the_run_uses():
    config = resolved({"node_num": 3, "gpu_per_node": 1}, {"engine_num": 1}, mode="both")
    lines = [line.strip() for line in explain(config).device_lines]
    assert "machine 0: rollout_engine_0 (GPU 0)" in lines
    assert "machine 1: trainer rank 0 (GPU 0)" in lines and "machine 2: trainer rank 1 (GPU 0)" in lines
