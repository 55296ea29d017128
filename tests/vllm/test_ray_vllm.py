"""The vllm engine as a Ray actor, fed by the trainer's weight broadcast (``sync_method: nccl``, gloo on CPU).

A ``mode: both`` run on Ray: the trainer, the explorer and one vLLM engine are actors in
their own processes, exploring and training at the same time. After every trainer step the
trainer broadcasts its weights; vLLM's worker process (a child of the engine actor) is a
rank of the broadcast group, receives the buckets and loads them through the model's
``load_weights``; the version is read back from that worker. The run is a `trivium run`
subprocess, as a user starts it, so Ray's processes belong to the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from trivium.data.builder import build_task_data

from .conftest import SHORT_ANSWER_REWARD, grpo_config

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)
pytest.importorskip("ray", reason="Ray comes with the vllm-test extra (`make test-vllm` installs it)")

STEPS = 10


@pytest.mark.slow
def test_a_vllm_engine_actor_learns_from_broadcast_weights(tiny_model_dir, tmp_path):
    data = build_task_data("arithmetic", tmp_path / "data", seed=0, num_train=400, num_test=16)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = grpo_config(tiny_model_dir, str(data), str(tmp_path / "runs"), steps=STEPS)
    config["mode"] = "both"
    config["cluster"]["placement"] = "ray"
    config["explorer"]["rollout_model"]["engine_num"] = 1
    config["synchronizer"].update({"sync_method": "nccl", "sync_offset": 1, "self_check_interval": 4})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [sys.executable, "-m", "trivium.cli.main", "run", "--config", str(path), "--plugin-dir", str(plugins)],
        capture_output=True, text=True, timeout=900, env=env, check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]

    run_dir = tmp_path / "runs" / "vllm" / "grpo"
    actors = json.loads((run_dir / "ray_actors.json").read_text())
    assert {"explorer", "trainer", "rollout_engine_0"} <= set(actors)
    assert len(set(actors.values())) == len(actors), "every actor has a process of its own"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    syncs = [r for r in records if "sync/bytes" in r]
    checks = [r for r in records if "sync/max_logprob_diff" in r]
    assert len(rewards) == STEPS
    assert len(syncs) >= STEPS - 2 and all(r["sync/bytes"] > 0 for r in syncs), "weights travel by broadcast"
    # Every 4th published version carries probes (the explorer, a step ahead, may skip some
    # versions); they are checked through vLLM's sampling path: the worker serves what the trainer sent.
    assert checks and {c["sync/version"] for c in checks} <= {1.0, 5.0, 9.0}
    assert all(c["sync/check_through_sampling"] == 1.0 for c in checks)
    assert max(c["sync/max_logprob_diff"] for c in checks) <= 1e-3, checks
    log = (run_dir / "log" / "rollout_engine_0.log").read_text()
    assert log.count("loaded weight version") == len(syncs)
    # Only the engine's samples train the policy: rising rewards mean the broadcast weights are served.
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"reward {first:.3f} -> {last:.3f}"
