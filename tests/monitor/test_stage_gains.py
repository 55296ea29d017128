"""Held-out accuracy by stage: a stage that does not evaluate takes its end from the next
stage's evaluation at step 0 and its start from the previous stage's end."""

from __future__ import annotations

import json

import pytest

from trivium.monitor.stage_gains import stage_accuracies, stage_gain_lines


def write_records(run_dir, records):
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return run_dir


@pytest.fixture
def three_stages(tmp_path):
    # An SFT stage (no evaluations), GRPO evaluated at steps 0, 10 and 20, then a second RL
    # stage that does not evaluate at step 0 (eval_on_startup off) but does at its step 5.
    sft = write_records(
        tmp_path / "sft", [{"role": "trainer", "step": step, "actor/sft_loss": 0.5} for step in (1, 2)]
    )
    grpo = write_records(
        tmp_path / "grpo",
        [
            {"role": "explorer", "step": 0, "eval/add/accuracy": 0.25},
            {"role": "explorer", "step": 10, "eval/add/accuracy": 0.5},
            {"role": "explorer", "step": 20, "eval/add/accuracy": 0.625},
        ],
    )
    more = write_records(tmp_path / "more", [{"role": "explorer", "step": 5, "eval/add/accuracy": 0.75}])
    return [("sft_warmup", sft), ("grpo", grpo), ("more_rl", more)]


def test_each_stage_starts_where_the_previous_ended(three_stages):
    (rows,) = stage_accuracies(three_stages).values()
    assert [(row.stage, row.start, row.end) for row in rows] == [
        ("sft_warmup", None, 0.25),  # its start is the base model, never evaluated
        ("grpo", 0.25, 0.625),
        ("more_rl", 0.625, 0.75),
    ]
    assert rows[0].gain is None
    assert rows[1].gain == pytest.approx(0.375) and rows[2].gain == pytest.approx(0.125)


def test_lines_give_each_stage_its_gain_in_points(three_stages):
    assert stage_gain_lines(three_stages) == [
        "held-out accuracy by stage on add:",
        "  sft_warmup: not evaluated -> 25.0%",
        "  grpo: 25.0% -> 62.5% (+37.5 points)",
        "  more_rl: 62.5% -> 75.0% (+12.5 points)",
    ]


def test_stages_without_any_evaluation_print_nothing(tmp_path):
    sft = write_records(tmp_path / "sft", [{"role": "trainer", "step": 1, "actor/sft_loss": 0.5}])
    assert stage_gain_lines([("sft_warmup", sft), ("missing", tmp_path / "never_ran")]) == []
