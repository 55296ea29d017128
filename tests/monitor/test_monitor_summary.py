"""The run summary, against the hand-computed numbers of the synthetic run."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from trivium.monitor.summary import compute_summary, print_summary, render_summary, reward_trend, summary_lines

from .synthetic_run import write_synthetic_run


def test_summary_numbers(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "demo" / "rising")
    summary = compute_summary(run_dir)
    assert summary.steps_done == {"explorer": 20, "trainer": 20}
    assert summary.wall_seconds == pytest.approx(
        205.0 - 10.0
    )  # explorer step 1 at +10 s, trainer step 20 at +205 s
    (accuracy,) = summary.evals
    assert (accuracy.taskset, accuracy.best, accuracy.best_step, accuracy.last, accuracy.last_step) == (
        "arith",
        0.6,
        10,
        0.5,
        20,
    )
    # rewards 0.1 + 0.04 s: steps 1..5 average s = 3 -> 0.22; steps 16..20 average s = 18 -> 0.82
    assert summary.reward_trend.window == 5
    assert summary.reward_trend.first_mean == pytest.approx(0.22)
    assert summary.reward_trend.last_mean == pytest.approx(0.82)
    assert summary.reward_trend.change == pytest.approx(0.60)
    assert summary.throughput == {"explorer": {"tokens/s": 1000.0, "experiences/s": 16.0}}
    assert summary.staleness_mean == pytest.approx(0.5)  # 1 on the 10 odd steps, 0 on the 10 even ones
    assert summary.staleness_max == 2.0
    assert summary.checkpoint_steps == [10, 20]
    assert summary.latest_checkpoint_dir == run_dir / "global_step_20"


def test_rendered_text(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "run")
    text = render_summary(run_dir)
    assert "steps done: explorer 20, trainer 20 in 3m15s" in text
    assert "eval arith: best 0.6000 (step 10), last 0.5000 (step 20)" in text
    assert "reward: 0.2200 (first 5 steps) -> 0.8200 (last 5), change +0.6000" in text
    assert "throughput (explorer, recent): 1,000.0 tokens/s, 16.0 experiences/s" in text
    assert "staleness: mean 0.50, max 2 steps" in text
    assert f"checkpoints: steps 10, 20; latest: {run_dir / 'global_step_20'}" in text
    console = Console(file=io.StringIO(), width=200)
    print_summary(run_dir, console)
    assert "run summary" in console.file.getvalue()


def test_short_runs_shrink_the_trend_window_and_empty_runs_say_so(tmp_path):
    records = [
        {"role": "explorer", "step": step, "rollout/reward_mean": value}
        for step, value in [(1, 0.0), (2, 0.3), (3, 1.0)]
    ]
    trend = reward_trend(records, window=5)
    assert (trend.window, trend.first_mean, trend.last_mean) == (1, 0.0, 1.0)
    assert reward_trend(records[:1], window=5) is None
    text = render_summary(tmp_path)
    assert "none logged yet" in text and "checkpoints: none yet" in text


def test_unfinished_checkpoints_are_not_listed(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "run", checkpoint_steps=(5,))
    (run_dir / "global_step_10.tmp" / "actor").mkdir(parents=True)
    (run_dir / "global_step_15" / "actor").mkdir(parents=True)  # no trainer_state.json: still being written
    assert compute_summary(run_dir).checkpoint_steps == [5]


def test_summary_shows_each_sides_idle_time(tmp_path):
    records = [
        {"role": "explorer", "step": 1, "time": 0.0, "time/idle_explorer": 0.0},
        {"role": "explorer", "step": 2, "time": 1.0, "time/idle_explorer": 0.5},
        {"role": "explorer", "step": 3, "time": 2.0, "time/idle_explorer": 1.0},
        {"role": "trainer", "step": 1, "time": 1.5, "time/idle_trainer": 2.0},
        {"role": "trainer", "step": 2, "time": 2.5, "time/idle_trainer": 0.0},
    ]
    summary = compute_summary(tmp_path, records)
    assert summary.idle["explorer"].total == pytest.approx(1.5)
    assert summary.idle["explorer"].per_step == pytest.approx(0.5)
    assert summary.idle["trainer"].per_step == pytest.approx(1.0)
    text = "\n".join(summary_lines(summary))
    assert "idle (waiting on the other side): explorer 1.5s (0.500s per step), trainer 2.0s (1.000s per step)" in text


def test_summary_shows_the_latest_start_up_time(tmp_path):
    records = [
        {"role": "explorer", "step": 1, "time": 0.0, "time/startup": 6.25},
        {"role": "explorer", "step": 2, "time": 1.0},
        {"role": "trainer", "step": 3, "time": 9.0, "time/startup": 3.5},  # a resumed process
    ]
    summary = compute_summary(tmp_path, records)
    assert summary.startup_seconds == 3.5
    assert "start-up: 3.5s from the process's start to its first step" in summary_lines(summary)
    assert compute_summary(tmp_path, records[1:2]).startup_seconds is None

