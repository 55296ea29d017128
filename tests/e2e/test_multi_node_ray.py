"""A run on several machines, simulated on this one with Ray's own multi-node cluster.

``ray.cluster_utils.Cluster`` starts a head and worker nodes, each with its own raylet and
resources; the workers advertise one GPU each that does not exist. With
``cluster.compute_device: cpu`` the run reserves and assigns those GPUs exactly as on a GPU
cluster and computes on the CPU over gloo. The test checks where each actor landed (node and
Ray's device assignment), against what `trivium plan` printed, and that the run learns with
its trainer's two ranks and its engine on three different machines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import read_metrics
from .ray_helpers import ray_config, run_to_end, short_answer_plugin, trivium, write

pytest.importorskip("ray.cluster_utils", reason="Ray is part of the dev extra; these tests need it")

pytestmark = [pytest.mark.slow, pytest.mark.ray]

MACHINES = 3  # one GPU each: the engine on machine 0, the trainer's two ranks on machines 1 and 2


# The cluster lives in a process of its own, as the runs do: none of Ray's in-process state
# (its GCS clients, the node objects) outlives the fixture inside the test session.
CLUSTER_PROCESS = f"""
import json, sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
workers = [cluster.add_node(num_cpus=1, num_gpus=1) for _ in range({MACHINES})]
cluster.wait_for_nodes()
print(json.dumps({{"address": cluster.address, "gpu_nodes": [node.node_id for node in workers]}}), flush=True)
sys.stdin.read()  # until the test session closes stdin
cluster.shutdown()
"""


@pytest.fixture(scope="module")
def three_gpu_machines():
    """A head node without GPUs and three worker nodes that advertise one GPU each."""
    process = subprocess.Popen(
        [sys.executable, "-c", CLUSTER_PROCESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        started = json.loads(process.stdout.readline())
        yield started["address"], set(started["gpu_nodes"])
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()


def multi_node_config(assets: dict, run_root: Path, address: str, **overrides) -> dict:
    return ray_config(
        assets,
        run_root,
        **{
            "cluster.ray_address": address,
            "cluster.node_num": MACHINES,
            "cluster.gpu_per_node": 1,
            "cluster.compute_device": "cpu",
            "explorer.rollout_model.engine_num": 1,
            "trainer.trainer_strategy": "fsdp2",
            **overrides,
        },
    )


def plan_machines(config_path: str) -> dict[int, list[str]]:
    """`trivium plan`'s "machine N: ..." lines, as machine -> what runs there."""
    output = subprocess.run(
        trivium("plan", "--config", config_path), capture_output=True, text=True, timeout=120, check=True
    ).stdout
    machines = {}
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("machine "):
            head, members = line.split(": ", 1)
            machines[int(head.split()[1])] = [member.split(" (")[0] for member in members.split("; ")]
    return machines


def test_engine_and_two_trainer_ranks_on_three_machines_learn_and_sync_across_them(
    tmp_path, assets, three_gpu_machines
):
    address, gpu_nodes = three_gpu_machines
    config = multi_node_config(
        assets,
        tmp_path / "runs",
        address,
        **{
            "algorithm.optimizer.lr": 5e-3,
            "buffer.batch_size": 8,
            "buffer.total_steps": 12,
            "buffer.explorer_input.default_reward_fn_type": "short_answer",
            "synchronizer.sync_offset": 1,
        },
    )
    path = write(tmp_path, config)
    planned = plan_machines(path)
    assert planned == {0: ["rollout_engine_0"], 1: ["trainer rank 0"], 2: ["trainer rank 1"]}

    result = run_to_end(path, "--plugin-dir", str(short_answer_plugin(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "runs" / "e2e" / "run"

    placement = json.loads((run_dir / "ray_placement.json").read_text())
    machines, actors = placement["machines"], placement["actors"]
    assert placement["compute_device"] == "cpu"
    # Every machine of the layout is a different worker node that advertises a GPU.
    assert len(set(machines.values())) == MACHINES and set(machines.values()) <= gpu_nodes
    # Each actor is on the machine the plan named, and Ray gave it that machine's GPU.
    for machine, name in [(0, "rollout_engine_0"), (1, "trainer"), (2, "trainer_rank_1")]:
        actor = actors[name]
        assert actor["machine"] == machine and actor["node_id"] == machines[str(machine)], (name, actor)
        assert actor["gpu_ids"] == ["0"] and actor["cuda_visible_devices"] == "0", (name, actor)
    # The explorer needs no GPU and sits beside its engine.
    assert actors["explorer"]["node_id"] == machines["0"] and actors["explorer"]["gpu_ids"] == []

    records = read_metrics(run_dir)
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    assert len(rewards) == 12
    syncs = [r["sync/bytes"] for r in records if "sync/bytes" in r]
    assert syncs and min(syncs) > 0, "weights are broadcast from machine 1 to machine 0"
    checks = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    assert checks and max(checks) < 1e-3, f"the engine serves the weights gathered from both ranks: {checks}"
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"reward did not rise across machines: {first:.3f} -> {last:.3f}"
    # Both ranks wrote their shards into the run directory every machine shares.
    assert (run_dir / "global_step_12" / "actor" / "sharded" / ".metadata").is_file()


def test_a_layout_larger_than_the_cluster_is_refused_before_anything_starts(tmp_path, assets, three_gpu_machines):
    address, _ = three_gpu_machines
    # Two engines and a trainer of two ranks on two machines of two GPUs: no node has two.
    config = multi_node_config(
        assets,
        tmp_path / "runs",
        address,
        **{"cluster.node_num": 2, "cluster.gpu_per_node": 2, "explorer.rollout_model.engine_num": 2},
    )
    result = run_to_end(write(tmp_path, config), timeout=300)
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert (
        "the run needs 2 machine(s) with 2, 2 GPU(s) (cluster.node_num 2 × cluster.gpu_per_node 2 = 4 GPUs: "
        "2 for the engines, 2 for the trainer), but the Ray cluster's 4 live node(s) offer 1, 1, 1, 0 GPU(s)"
    ) in message, message[-2000:]
    assert not (tmp_path / "runs" / "e2e" / "run" / "ray_actors.json").exists(), "no actor was started"
