"""create_monitor without a backend: the console line and metrics.jsonl."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
import torch
from rich.console import Console

from trivium.errors import UserError
from trivium.monitor import create_monitor
from trivium.monitor.console_monitor import format_value, select_console_keys
from trivium.monitor.metrics_file import read_metrics, series


def recording_console() -> Console:
    return Console(file=io.StringIO(), width=300, force_terminal=False, highlight=False)


def test_metrics_jsonl_has_role_step_time_and_values_for_both_roles(tmp_path):
    console = recording_console()
    explorer = create_monitor(run_dir=tmp_path, project="p", name="r", role="explorer", console=console)
    trainer = create_monitor(run_dir=tmp_path, project="p", name="r", role="trainer", console=console)
    explorer.log({"rollout/reward_mean": 0.25, "count": 3}, step=1)
    trainer.log({"actor/pg_loss": torch.tensor(0.5)}, step=1)
    explorer.log({"rollout/reward_mean": np.float32(0.75)}, step=2)
    explorer.close()
    trainer.close()

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert first["role"] == "explorer" and first["step"] == 1
    assert first["rollout/reward_mean"] == 0.25 and first["count"] == 3.0
    assert abs(first["time"] - json.loads(lines[2])["time"]) < 60
    records = read_metrics(tmp_path)
    assert series(records, "rollout/reward_mean", role="explorer") == ([1, 2], [0.25, 0.75])
    assert series(records, "actor/pg_loss", role="trainer") == ([1], [0.5])


def test_nan_is_written_as_null_and_the_file_stays_strict_json(tmp_path):
    with create_monitor(
        run_dir=tmp_path, project="p", name="r", role="trainer", console=recording_console()
    ) as group:
        group.log({"actor/pg_loss": float("nan"), "actor/entropy": float("inf"), "ok": 1.0}, step=4)
    line = (tmp_path / "metrics.jsonl").read_text().strip()
    record = json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert record["actor/pg_loss"] is None and record["actor/entropy"] is None and record["ok"] == 1.0
    assert series([record], "actor/pg_loss") == ([], [])


def test_torn_last_line_is_skipped_when_reading(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"role": "explorer", "step": 1, "a": 1}\n{"role": "expl')
    assert read_metrics(tmp_path) == [{"role": "explorer", "step": 1, "a": 1}]


def test_non_numeric_metric_names_its_key(tmp_path):
    group = create_monitor(
        run_dir=tmp_path, project="p", name="r", role="explorer", console=recording_console()
    )
    with pytest.raises(TypeError, match="'rollout/note'"):
        group.log({"rollout/note": "hello"}, step=1)
    with pytest.raises(ValueError, match="reserved"):
        group.log({"step": 3.0}, step=1)
    group.close()


def test_console_line_is_compact_and_headline_first(tmp_path):
    console = recording_console()
    metrics = {f"z/extra_{index}": float(index) for index in range(10)}
    metrics.update({"actor/pg_loss": 0.123456, "rollout/reward_mean": 0.5, "eval/gsm8k/accuracy": 0.25})
    group = create_monitor(run_dir=tmp_path, project="p", name="r", role="explorer", console=console)
    group.log(metrics, step=7)
    group.close()
    output = console.file.getvalue().strip()
    assert output.count("\n") == 0
    assert output.startswith(
        "[explorer] step 7 | rollout/reward_mean 0.5 | eval/gsm8k/accuracy 0.25 | actor/pg_loss 0.1235"
    )
    assert output.endswith("(+5 more)")
    assert select_console_keys({"b": 1.0, "a": 2.0}, 8) == ["a", "b"]
    assert [format_value(v) for v in (3.0, 1234567.0, 0.0001, math.nan)] == [
        "3",
        "1234567",
        "1.000e-04",
        "nan",
    ]


def test_unknown_monitor_type_is_a_user_error_with_a_suggestion(tmp_path):
    with pytest.raises(UserError, match=r"monitor.monitor_type.*Did you mean 'tensorboard'"):
        create_monitor(run_dir=tmp_path, project="p", name="r", role="explorer", monitor_type="tensorbord")


def test_role_must_be_explorer_or_trainer(tmp_path):
    with pytest.raises(ValueError, match="role"):
        create_monitor(run_dir=tmp_path, project="p", name="r", role="critic")


def test_group_closes_every_monitor_even_when_one_fails(tmp_path):
    from trivium.monitor.base import Monitor, MonitorGroup

    closed = []

    class Failing(Monitor):
        def log(self, metrics, step):
            pass

        def close(self):
            raise RuntimeError("disk full")

    class Recording(Monitor):
        def log(self, metrics, step):
            pass

        def close(self):
            closed.append(True)

    group = MonitorGroup([Failing(), Recording()])
    with pytest.raises(RuntimeError, match="disk full"):
        group.close()
    assert closed == [True]


def test_missing_backend_package_names_the_pip_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    with pytest.raises(UserError, match=r"pip install 'trivium\[wandb\]'"):
        create_monitor(run_dir=tmp_path, project="p", name="r", role="explorer", monitor_type="wandb")


PLUGIN_SOURCE = """
from trivium.monitor.base import MONITOR_BACKENDS, Monitor


@MONITOR_BACKENDS.register("in_memory_list")
class ListMonitor(Monitor):
    def __init__(self, *, run_dir, project, run_name, role, monitor_args, config_dict):
        self.run_name = run_name
        self.logged = []

    def log(self, metrics, step):
        self.logged.append((metrics, step))
"""


@pytest.mark.parametrize("monitor_type", ["in_memory_list", "trivium_plugin_list_monitor:ListMonitor"])
def test_plugin_backend_by_registered_name_or_dotted_path(tmp_path, monitor_type):
    from trivium.registry import load_plugin_dir

    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "list_monitor.py").write_text(PLUGIN_SOURCE)
    load_plugin_dir(plugin_dir)
    group = create_monitor(
        run_dir=tmp_path,
        project="p",
        name="r",
        role="trainer",
        monitor_type=monitor_type,
        console=recording_console(),
    )
    group.log({"a": 1}, step=3)
    backend = group.monitors[-1]
    assert backend.run_name == "r_trainer" and backend.logged == [({"a": 1.0}, 3)]
    group.close()


def test_builtin_monitor_type_names_ignore_case(tmp_path):
    group = create_monitor(
        run_dir=tmp_path,
        project="p",
        name="r",
        role="explorer",
        monitor_type="None",
        console=recording_console(),
    )
    assert len(group.monitors) == 2  # console and metrics.jsonl only
    group.close()
