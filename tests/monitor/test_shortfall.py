"""A run that trained less than it planned: the error or warning it ends with, and what its summary says."""

from __future__ import annotations

import json

from trivium.monitor.shortfall import Shortfall
from trivium.monitor.summary import compute_summary, summary_lines


def test_failed_tasks_make_a_short_run_an_error_that_says_what_and_why():
    short = Shortfall(planned_steps=3, trained_steps=2, untrained_experiences=4, failed_tasks=3)
    assert short.falls_short and short.is_error
    assert short.lines() == [
        "the trainer trained 2 of 3 steps; 1 not trained; 4 experiences written were never trained",
        "why: 3 task(s) failed after their retries (see log/explorer_runner_*.log)",
    ]


def test_shortfalls_the_config_asked_for_are_warnings():
    over_rollout = Shortfall(planned_steps=6, trained_steps=5, untrained_experiences=0, partial_steps=1, late_tasks=6)
    assert over_rollout.falls_short and not over_rollout.is_error
    # ...unless something else went wrong too, or nothing explains the gap.
    assert Shortfall(planned_steps=6, trained_steps=5, untrained_experiences=0, late_tasks=6, failed_tasks=1).is_error
    unexplained = Shortfall(planned_steps=10, trained_steps=2, untrained_experiences=0)
    assert unexplained.is_error and "fewer experiences than trainer.total_steps" in unexplained.lines()[1]


def test_a_skipped_update_falls_short_even_when_every_step_ran():
    skipped = Shortfall(planned_steps=2, trained_steps=2, untrained_experiences=16, skipped_updates=1)
    assert skipped.is_error
    assert "1 with the update skipped" in skipped.lines()[0] and "non-finite gradients" in skipped.lines()[1]
    assert Shortfall.from_metrics(skipped.to_metrics()) == skipped


def _write(run_dir, records):
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def test_the_summary_says_how_far_the_trainer_got_and_why(tmp_path):
    short = Shortfall(planned_steps=3, trained_steps=2, untrained_experiences=4, failed_tasks=3)
    _write(tmp_path / "run", [
        {"role": "explorer", "step": 3, "time": 1.0, "rollout/reward_mean": 1e308},
        {"role": "trainer", "step": 2, "time": 2.0, "actor/pg_loss": 0.1},
        {"role": "trainer", "step": 2, "time": 3.0, **short.to_metrics()},
    ])
    lines = summary_lines(compute_summary(tmp_path / "run"))
    assert any(line.startswith("steps done: explorer 3, trainer 2 of 3") for line in lines)
    assert "fell short: the trainer trained 2 of 3 steps; 1 not trained; 4 experiences written were never trained" in lines
    assert "  why: 3 task(s) failed after their retries (see log/explorer_runner_*.log)" in lines


def test_a_later_run_that_trained_on_clears_the_shortfall_and_huge_rewards_stay_short(tmp_path):
    short = Shortfall(planned_steps=3, trained_steps=2, untrained_experiences=4, failed_tasks=3)
    records = [{"role": "trainer", "step": 2, "time": 1.0, **short.to_metrics()},
               {"role": "trainer", "step": 3, "time": 2.0, "actor/pg_loss": 0.1}]
    records += [{"role": "explorer", "step": s, "time": 1.0 + s, "rollout/reward_mean": 1e308} for s in (1, 2)]
    _write(tmp_path / "run", records)
    lines = summary_lines(compute_summary(tmp_path / "run"))
    assert not any("fell short" in line for line in lines)
    (reward,) = [line for line in lines if line.startswith("reward:")]
    assert reward == "reward: 1e+308 (first 1 steps) -> 1e+308 (last 1), change +0.0000" and len(reward) < 80
