"""Finding an existing run's directory from its config (``trivium log`` / ``trivium report``)."""

from __future__ import annotations

import os
import time

import pytest

from trivium.cli.main import main
from trivium.errors import UserError
from trivium.monitor.run_lookup import locate_run_dir

from .synthetic_run import write_synthetic_run


def write_config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "run.yaml"
    path.write_text(f"project: demo\nname: rising\ncheckpoint_root_dir: {tmp_path / 'ckpt'}\n{extra}")
    return str(path)


def touch_metrics(run_dir, seconds_ago: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("")
    stamp = time.time() - seconds_ago
    os.utime(run_dir / "metrics.jsonl", (stamp, stamp))


def test_config_names_checkpoint_root_project_name(tmp_path):
    config = write_config(tmp_path)
    run_dir = tmp_path / "ckpt" / "demo" / "rising"
    touch_metrics(run_dir, 0)
    assert locate_run_dir(config_path=config) == run_dir
    other = tmp_path / "ckpt" / "demo" / "second"
    touch_metrics(other, 0)
    assert locate_run_dir(config_path=config, overrides=["name=second"]) == other


def test_a_newer_timestamped_run_of_the_same_config_wins(tmp_path):
    config = write_config(tmp_path)
    touch_metrics(tmp_path / "ckpt" / "demo" / "rising", 600)
    newer = tmp_path / "ckpt" / "demo" / "rising_20260101120000"
    touch_metrics(newer, 5)
    touch_metrics(tmp_path / "ckpt" / "demo" / "rising_other", 0)  # another run name, not a retry
    assert locate_run_dir(config_path=config) == newer


def test_staged_config_takes_the_most_recent_stage(tmp_path):
    config = write_config(tmp_path, "stages:\n  - stage_name: sft\n  - stage_name: grpo\n")
    base = tmp_path / "ckpt" / "demo" / "rising"
    touch_metrics(base / "sft", 300)
    touch_metrics(base / "grpo", 1)
    assert locate_run_dir(config_path=config) == base / "grpo"


def test_missing_run_says_where_it_looked(tmp_path):
    config = write_config(tmp_path)
    with pytest.raises(UserError, match=r"expected .*ckpt/demo/rising .*--run-dir"):
        locate_run_dir(config_path=config)
    with pytest.raises(UserError, match="no such file"):
        locate_run_dir(config_path=tmp_path / "nope.yaml")


def test_cli_report_with_config_and_override(tmp_path, capsys):
    config = write_config(tmp_path)
    run_dir = write_synthetic_run(tmp_path / "ckpt" / "demo" / "other")
    assert main(["report", "--config", config, "name=other", "--no-summary"]) == 0
    assert f"report: {run_dir / 'report.html'}" in capsys.readouterr().out
    assert main(["report", "--run-dir", str(run_dir), "name=other"]) == 2
    assert "only apply with --config" in capsys.readouterr().err
