"""Explore mode: experiences land in SQLite, and broken workflows never stop the run."""

import textwrap

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from trivium.buffer.sql_schema import ExperienceModel
from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

BROKEN_WORKFLOWS = textwrap.dedent(
    '''
    import time
    from trivium.workflows import WORKFLOWS
    from trivium.workflows.math_workflow import MathWorkflow


    class Flaky(MathWorkflow):
        """Every third task raises, hangs or returns garbage; the rest work."""

        def run(self):
            row = self.task.index % 6
            if row == 1:
                raise RuntimeError("boom")
            if row == 3:
                time.sleep(60)
            if row == 5:
                return ["not an experience"]
            return super().run()


    WORKFLOWS.register("flaky", Flaky)
    '''
)


@pytest.mark.slow
def test_explore_writes_scored_experiences_and_survives_broken_workflows(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "flaky.py").write_text(BROKEN_WORKFLOWS)
    db = tmp_path / "experiences.db"
    config = base_config(assets, tmp_path / "runs", mode="explore")
    config["buffer"]["batch_size"] = 6
    config["buffer"]["explorer_input"]["default_workflow_type"] = "flaky"
    config["buffer"]["trainer_input"]["experience_buffer"] = {"name": "explored", "storage_type": "sql", "path": str(db)}
    config["explorer"].update(
        {"max_timeout": 3, "max_retry_times": 1, "runner_per_model": 6, "runner_state_report_interval": 1}
    )
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0

    records = [r for r in read_metrics(tmp_path / "runs" / "e2e" / "run") if "rollout/failed_tasks" in r]
    assert len(records) == 2
    # Per step of 6 tasks: one raises, one hangs, one returns garbage.
    assert [r["rollout/failed_tasks"] for r in records] == [3, 3]
    assert records[0]["rollout/timeouts"] == 2  # the hanging task, tried twice
    assert records[0]["rollout/retries"] == 3

    # Runner status reports name the task a hanging runner is stuck on.
    explorer_log = (tmp_path / "runs" / "e2e" / "run" / "log" / "explorer.log").read_text()
    assert "runners | 6:" in explorer_log and "running task train:3:" in explorer_log

    session = sessionmaker(bind=create_engine(f"sqlite:///{db}"))()
    rows = session.query(ExperienceModel).all()
    assert len(rows) == 2 * 3 * 4  # 2 steps x 3 working tasks x 4 repeats
    for row in rows:
        exp = row.to_experience()
        assert exp.tokens.numel() > exp.prompt_length
        assert exp.logprobs.shape[0] == exp.response_length
        assert exp.reward is not None and exp.model_version == 0


def test_a_mistake_that_fails_every_task_stops_the_run_with_its_message(assets, tmp_path, capsys):
    config = base_config(assets, tmp_path / "runs", mode="explore")
    config["buffer"]["explorer_input"]["taskset"]["workflow_args"] = {"system_promt": "typo"}
    config["buffer"]["trainer_input"]["experience_buffer"] = {
        "name": "explored", "storage_type": "sql", "path": str(tmp_path / "x.db"),
    }
    assert main(["run", "--config", write_config(tmp_path, config)]) == 2
    err = capsys.readouterr().err
    assert "every task failed" in err and "system_promt" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_an_explore_run_started_again_continues_where_it_stopped(assets, tmp_path):
    db = tmp_path / "experiences.db"
    config = base_config(assets, tmp_path / "runs", mode="explore", continue_from_checkpoint=True)
    config["buffer"]["trainer_input"]["experience_buffer"] = {"name": "explored", "storage_type": "sql", "path": str(db)}
    config["buffer"]["total_steps"] = 2
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    config["buffer"]["total_steps"] = 4
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    session = sessionmaker(bind=create_engine(f"sqlite:///{db}"))()
    task_ids = [row.to_experience().task_id for row in session.query(ExperienceModel).all()]
    # 4 steps x 4 tasks, each task once: the second run did not repeat the first run's tasks.
    assert len(set(task_ids)) == 16 and len(task_ids) == 16 * 4
