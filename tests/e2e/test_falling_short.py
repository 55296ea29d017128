"""Runs whose trainer cannot reach its steps end promptly, non-zero, saying what was not trained and why.

A plugin workflow fails one task in four (each step's first row): a step of 4 tasks x 4
repeats writes 12 of its 16 experiences. A plugin experience operator makes every advantage
infinite, so the trainer's update is not finite.
"""

from __future__ import annotations

import json
import textwrap
import time

from trivium.cli.main import main
from trivium.runtime.trained_samples import skipped_steps, trained_lineage

from .conftest import base_config, write_config

PLUGINS = {
    "quarter_failing.py": textwrap.dedent(
        """
        from trivium.workflows.math_workflow import MathWorkflow
        from trivium.workflows.registry import WORKFLOWS


        @WORKFLOWS.register("quarter_failing")
        class QuarterFailing(MathWorkflow):
            def run(self):
                if int(self.task.task_id.split(":")[1]) % 4 == 0:
                    raise RuntimeError("injected: this task always fails")
                return super().run()
        """
    ),
    "infinite_advantages.py": textwrap.dedent(
        """
        from trivium.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperator


        @EXPERIENCE_OPERATORS.register("infinite_advantages")
        class InfiniteAdvantages(ExperienceOperator):
            name = "infinite_advantages"

            def process(self, experiences):
                for experience in experiences:
                    experience.advantages = experience.advantages * float("inf")
                return experiences, {}
        """
    ),
}


def run(tmp_path, config: dict) -> int:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    for name, text in PLUGINS.items():
        (plugins / name).write_text(text)
    return main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)])


def failing_config(assets, tmp_path, mode: str) -> dict:
    return base_config(assets, tmp_path / "runs", mode=mode, **{
        "buffer.total_steps": 3, "buffer.explorer_input.default_workflow_type": "quarter_failing",
        "explorer.max_retry_times": 0, "synchronizer.sync_timeout": 600,
    })


def console(capsys, caplog) -> str:
    """What the run printed, and its log records of warnings and errors (shown on the console's stderr)."""
    printed = capsys.readouterr()
    messages = [record.getMessage() for record in caplog.records if record.levelname in ("WARNING", "ERROR")]
    return "\n".join([printed.out, printed.err, *messages])


def errors(caplog) -> str:
    return "\n".join(record.getMessage() for record in caplog.records if record.levelname == "ERROR")


def test_both_with_failed_tasks_stops_at_once_and_exits_non_zero_saying_why(assets, tmp_path, capsys, caplog):
    started = time.monotonic()
    assert run(tmp_path, failing_config(assets, tmp_path, "both")) == 1
    assert time.monotonic() - started < 60  # not the 600 s sync_timeout: the missing version cannot come
    output = console(capsys, caplog)
    assert "the explorer stops before its step 2: the explorer needs weight version 1, but the trainer is at " \
           "version 0 with 12 untrained experiences, fewer than the 16" in output
    assert "the run fell short: the trainer trained 1 of 3 steps; 2 not trained; 1 on a partial batch" in errors(caplog)
    assert "1 task(s) failed after their retries" in output
    assert "trainer 1 of 3" in output  # the summary says the same


def test_colocate_with_failed_tasks_never_trains_a_stale_sample_and_exits_non_zero(assets, tmp_path, capsys, caplog):
    assert run(tmp_path, failing_config(assets, tmp_path, "colocate")) == 1
    output = console(capsys, caplog)
    lineage = trained_lineage(tmp_path / "runs" / "e2e" / "run")
    assert list(lineage) == [1] and len(lineage[1]) == 16
    # On-policy: step k trains only samples of the weights before it (version k - 1).
    assert all(version == step - 1 for step, samples in lineage.items() for *_, version in samples)
    assert "8 experiences, fewer than a training batch of 16, are discarded at this weight sync" in output
    assert "the run fell short: the trainer trained 1 of 3 steps; 2 not trained; 20 experiences written " \
           "were never trained" in output
    assert "3 task(s) failed after their retries" in output


def test_a_non_finite_update_is_an_error_naming_step_and_samples_and_the_trail_says_skipped(assets, tmp_path, capsys,
                                                                                           caplog):
    config = base_config(assets, tmp_path / "runs", **{
        "buffer.total_steps": 1, "data_processor.experience_pipeline.operators": [{"name": "infinite_advantages"}],
    })
    assert run(tmp_path, config) == 1
    assert "trainer step 1: the update was skipped: non-finite gradients (1 actor update(s) skipped). " \
           "Its 16 samples were not trained (train:0:0:0#0, train:0:0:0#1" in errors(caplog)
    assert "1 with the update skipped" in errors(caplog)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    assert trained_lineage(run_dir) == {1: []} and 1 in skipped_steps(run_dir)
    record = json.loads((run_dir / "log" / "trained_samples.jsonl").read_text().splitlines()[-1])
    assert record["skipped"].startswith("non-finite gradients") and len(record["samples"]) == 16
