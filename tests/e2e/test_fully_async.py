"""fully_async with over-rollout in real `both` runs, in this process and on Ray.

A workflow plugin sleeps on one task of each step: the explorer goes on without those tasks
instead of waiting for them, trains within the staleness bound, and reports idle time.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from trivium.runtime.trained_samples import trained_lineage

from .conftest import base_config, read_metrics

pytestmark = pytest.mark.slow

SLEEP_SECONDS = 6.0
# Sleeps in Python, so an abandoned attempt can be stopped. Task ids are "taskset:row:epoch:slot"
# and a step reads 4 rows in order, so each step has exactly one slow task.
SLOW_MATH = f"""
import time

from trivium.workflows.math_workflow import MathWorkflow
from trivium.workflows.registry import WORKFLOWS


@WORKFLOWS.register("slow_math")
class SlowMath(MathWorkflow):
    def run(self):
        if int(self.task.task_id.split(":")[1]) % 4 == 0:
            deadline = time.monotonic() + {SLEEP_SECONDS}
            while time.monotonic() < deadline:
                time.sleep(0.01)
        return super().run()
"""


def fully_async_config(assets, run_root, placement: str) -> dict:
    overrides = {
        "mode": "both",
        "buffer.total_steps": 6,
        "buffer.explorer_input.default_workflow_type": "slow_math",
        "synchronizer.sync_style": "fully_async",
        "synchronizer.sync_offset": 1,
        "trainer.old_logprobs_source": "decoupled",
        "trainer.behaviour_weight_range": [0.2, 5.0],
        "explorer.runner_per_model": 4,
        "explorer.over_rollout": {"ratio": 0.25, "wait_after_min": 0.2},
        "explorer.dynamic_timeout": {"enable": True, "ratio": 20.0},
        "cluster.placement": placement,
    }
    if placement == "ray":
        overrides["synchronizer.sync_method"] = "nccl"
    return base_config(assets, run_root, **overrides)


@pytest.mark.parametrize("placement", ["process", pytest.param("ray", marks=pytest.mark.ray)])
def test_fully_async_run_leaves_slow_tasks_behind_within_the_staleness_bound(assets, tmp_path, placement):
    if placement == "ray":
        pytest.importorskip("ray", reason="Ray is part of the dev extra")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "slow_math.py").write_text(SLOW_MATH)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(fully_async_config(assets, tmp_path / "runs", placement), sort_keys=False))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [sys.executable, "-m", "trivium.cli.main", "run", "--config", str(config_path), "--plugin-dir", str(plugins)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "runs" / "e2e" / "run"
    records = read_metrics(run_dir)
    explorer = [r for r in records if r.get("role") == "explorer" and "rollout/reward_mean" in r]
    trainer = [r for r in records if r.get("role") == "trainer" and "trainer/step" in r]
    assert len(explorer) == 6 and trainer
    # Slow tasks were left behind, and no step waited for one of them.
    assert sum(r["rollout/late_tasks_dropped"] for r in explorer) >= 1
    assert max(r["time/explore_step"] for r in explorer) < SLEEP_SECONDS - 1
    assert all("rollout/dynamic_timeout" in r for r in explorer)
    # Idle time of each side is logged per step and shown in the summary.
    assert all(r["time/idle_explorer"] >= 0 for r in explorer)
    assert all(r["time/idle_trainer"] >= 0 for r in trainer)
    assert "idle (waiting on the other side)" in result.stdout + result.stderr
    # The first step of the process logged the start-up time, once, and the summary shows it.
    startups = [r["time/startup"] for r in explorer + trainer if "time/startup" in r]
    assert len(startups) == 1 and 0 < startups[0] < 120
    assert "start-up: " in result.stdout + result.stderr
    # The decoupled objective weighted the stale tokens; staleness stayed within sync_offset.
    assert all("decoupled/weight_mean" in r and 0 <= r["decoupled/masked_frac"] <= 1 for r in trainer)
    assert "off-policy correction (pi_proximal / pi_engine): " in result.stdout + result.stderr
    assert max(r["staleness/max"] for r in trainer) <= 1
    for step, samples in trained_lineage(run_dir).items():
        assert all(step - 1 - 1 <= version <= step - 1 for *_, version in samples), f"step {step}: {samples}"
