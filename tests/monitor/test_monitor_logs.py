"""Component log files and ``trivium log``."""

from __future__ import annotations

import logging
import re

import pytest

from trivium.cli.main import main
from trivium.errors import UserError
from trivium.monitor.logs import (
    LogFollower,
    current_node_ip,
    filter_records,
    find_log_files,
    read_log_records,
    setup_component_logger,
)

HEADER = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6} \| (\w+) \| (\w+) \| (.*)$")


def close_handlers(*loggers: logging.Logger) -> None:
    for logger in loggers:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()


@pytest.fixture
def run_with_logs(tmp_path):
    explorer = setup_component_logger(tmp_path, "explorer", level="debug")
    runner = setup_component_logger(tmp_path, "explorer_runner_0")
    trainer = setup_component_logger(tmp_path, "trainer", level="INFO")
    explorer.debug("engine warm-up")
    explorer.info("explore step 1 done")
    runner.warning("workflow timeout on task 7, retrying")
    trainer.debug("hidden: below the trainer's level")
    trainer.info("train step 1 loss 0.5")
    try:
        raise ValueError("bad reward value")
    except ValueError:
        runner.exception("workflow failed on task 8")
    explorer.info("explore step 2 done")
    yield tmp_path
    close_handlers(explorer, runner, trainer)


def test_each_component_writes_its_own_file_with_time_level_component(run_with_logs):
    log_dir = run_with_logs / "log"
    assert sorted(path.name for path in log_dir.iterdir()) == [
        "explorer.log",
        "explorer_runner_0.log",
        "trainer.log",
    ]
    first = (log_dir / "explorer.log").read_text().splitlines()[0]
    assert HEADER.match(first).groups() == ("DEBUG", "explorer", "engine warm-up")
    assert "hidden" not in (log_dir / "trainer.log").read_text()


def test_setting_up_twice_does_not_duplicate_lines(tmp_path):
    logger = setup_component_logger(tmp_path, "trainer")
    logger = setup_component_logger(tmp_path, "trainer")
    logger.info("once")
    assert (tmp_path / "log" / "trainer.log").read_text().count("once") == 1
    close_handlers(logger)


def test_group_by_node_puts_the_file_under_the_node_ip(tmp_path):
    logger = setup_component_logger(tmp_path, "explorer", group_by_node=True)
    logger.info("hello")
    path = tmp_path / "log" / current_node_ip() / "explorer.log"
    assert path.exists() and find_log_files(tmp_path, "explorer") == [path]
    close_handlers(logger)


def test_bad_level_names_the_key(tmp_path):
    with pytest.raises(UserError, match=r"log.level.*'LOUD'.*DEBUG, INFO, WARNING, ERROR"):
        setup_component_logger(tmp_path, "explorer", level="LOUD")


def test_records_merge_in_time_order_and_keep_tracebacks_together(run_with_logs):
    records = read_log_records(find_log_files(run_with_logs))
    assert [record.component for record in records] == [
        "explorer",
        "explorer",
        "explorer_runner_0",
        "trainer",
        "explorer_runner_0",
        "explorer",
    ]
    failure = records[4]
    assert failure.level == "ERROR" and "Traceback" in failure.text and "bad reward value" in failure.text
    warnings_up = filter_records(records, min_level=logging.WARNING)
    assert [record.level for record in warnings_up] == ["WARNING", "ERROR"]
    assert filter_records(records, keyword="BAD REWARD") == [failure]  # keyword in the traceback lines
    assert filter_records(records, last=2) == records[4:]


def test_follower_returns_only_appended_records_and_new_files(tmp_path):
    explorer = setup_component_logger(tmp_path, "explorer")
    explorer.info("before")
    follower = LogFollower(tmp_path, from_end=True)
    assert follower.poll() == []
    explorer.info("after")
    trainer = setup_component_logger(tmp_path, "trainer")
    trainer.warning("new file")
    texts = [record.text.split(" | ")[-1] for record in follower.poll()]
    assert texts == ["after", "new file"]
    assert [r.level for r in follower.poll(min_level=logging.WARNING)] == []
    close_handlers(explorer, trainer)


def test_cli_filters_by_level_keyword_component_and_count(run_with_logs, capsys):
    assert main(["log", "--run-dir", str(run_with_logs), "-l", "warning"]) == 0
    output = capsys.readouterr().out
    assert "workflow timeout on task 7" in output and "bad reward value" in output
    assert "explore step" not in output

    assert (
        main(["log", "--run-dir", str(run_with_logs), "-k", "step", "--component", "explorer", "-n", "1"])
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("| explorer | explore step 2 done")

    assert main(["log", "--run-dir", str(run_with_logs), "--component", "critic"]) == 2
    error = capsys.readouterr().err
    assert "no log files for component 'critic'" in error and "explorer_runner_0" in error


def test_cli_needs_a_config_or_a_run_dir(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["log"])
    assert main(["log", "--run-dir", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
