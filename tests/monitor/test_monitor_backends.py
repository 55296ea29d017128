"""Each backend, read back with the tool's own reader."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from trivium.monitor import create_monitor
from trivium.monitor.base import Monitor

from .wandb_records import read_records

CONFIG = {"algorithm": {"algorithm_type": "grpo", "repeat_times": 4}, "model": {"model_path": "/m"}}


def quiet_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=False)


def log_two_roles(tmp_path, monitor_type, monitor_args=None, group=""):
    groups = {
        role: create_monitor(
            run_dir=tmp_path,
            project="demo",
            name="rising",
            role=role,
            monitor_type=monitor_type,
            monitor_args=monitor_args or {},
            config_dict=CONFIG,
            group=group,
            console=quiet_console(),
        )
        for role in ("explorer", "trainer")
    }
    for step, reward in [(1, 0.25), (2, 0.5), (3, 0.75)]:
        groups["explorer"].log({"rollout/reward_mean": reward}, step=step)
        groups["trainer"].log({"actor/pg_loss": 1.0 / step}, step=step)
    groups["explorer"].log({"eval/gsm8k@4/accuracy": 0.5}, step=3)
    for group in groups.values():
        group.close()


def test_tensorboard_event_files_per_role(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_two_roles(tmp_path, "tensorboard")
    explorer_dir = tmp_path / "monitor" / "tensorboard" / "rising_explorer"
    trainer_dir = tmp_path / "monitor" / "tensorboard" / "rising_trainer"
    explorer = EventAccumulator(str(explorer_dir))
    explorer.Reload()
    rewards = explorer.Scalars("rollout/reward_mean")
    assert [(event.step, event.value) for event in rewards] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert explorer.Scalars("eval/gsm8k@4/accuracy")[0].value == 0.5
    trainer = EventAccumulator(str(trainer_dir))
    trainer.Reload()
    assert [round(event.value, 4) for event in trainer.Scalars("actor/pg_loss")] == [1.0, 0.5, 0.3333]
    config_text = trainer.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "algorithm_type: grpo" in config_text


def test_tensorboard_group_is_a_folder_and_unknown_args_are_refused(tmp_path):
    from trivium.errors import UserError

    log_two_roles(tmp_path, "tensorboard", group="lr_sweep")
    grouped = tmp_path / "monitor" / "tensorboard" / "lr_sweep"
    assert sorted(path.name for path in grouped.iterdir()) == ["rising_explorer", "rising_trainer"]
    with pytest.raises(UserError, match=r"\['flush_secs'\] not understood by the tensorboard monitor; it takes none"):
        create_monitor(run_dir=tmp_path, project="demo", name="r", role="trainer", monitor_type="tensorboard",
                       monitor_args={"flush_secs": 5})


class Plain(Monitor):
    """A plugin backend written before groups existed."""

    def __init__(self, *, run_dir, project, run_name, role, monitor_args, config_dict):
        self.run_name = run_name

    def log(self, metrics, step):
        pass


def test_a_backend_without_groups_still_works_and_refuses_a_set_group(tmp_path):
    from trivium.errors import UserError

    kwargs = dict(run_dir=tmp_path, project="demo", name="r", role="trainer", monitor_type=f"{__name__}:Plain")
    assert isinstance(create_monitor(**kwargs).monitors[-1], Plain)
    with pytest.raises(UserError, match="group: the monitor type .* takes no group of runs"):
        create_monitor(**kwargs, group="sweep")


@pytest.mark.slow  # MLflow creates and migrates its SQLite schema: ~3-8 s on a busy 2-core machine
def test_mlflow_local_store_in_run_dir(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from trivium.monitor.mlflow_monitor import local_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    log_two_roles(tmp_path, "mlflow", group="lr_sweep")
    assert (tmp_path / "monitor" / "mlflow" / "mlflow.db").exists()
    client = MlflowClient(tracking_uri=local_tracking_uri(tmp_path))
    experiment = client.get_experiment_by_name("demo")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"rising_explorer", "rising_trainer"}
    explorer = runs["rising_explorer"]
    assert explorer.info.status == "FINISHED"
    history = client.get_metric_history(explorer.info.run_id, "rollout/reward_mean")
    assert [(metric.step, metric.value) for metric in history] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    # '@' is not allowed in MLflow names; it becomes '_'.
    assert client.get_metric_history(explorer.info.run_id, "eval/gsm8k_4/accuracy")[0].value == 0.5
    assert explorer.data.params["algorithm.repeat_times"] == "4"
    assert explorer.data.tags["trivium.role"] == "explorer" and explorer.data.tags["trivium.group"] == "lr_sweep"
    trainer_losses = client.get_metric_history(runs["rising_trainer"].info.run_id, "actor/pg_loss")
    assert [metric.step for metric in trainer_losses] == [1, 2, 3]


def test_mlflow_rejects_unknown_monitor_args(tmp_path):
    from trivium.errors import UserError

    with pytest.raises(UserError, match=r"monitor.monitor_args: \['url'\].*uri, username, password"):
        create_monitor(
            run_dir=tmp_path,
            project="demo",
            name="r",
            role="trainer",
            monitor_type="mlflow",
            monitor_args={"url": "x"},
        )


@pytest.mark.parametrize(("group", "run_group"), [("", "rising"), ("lr_sweep", "lr_sweep")])
def test_wandb_offline_run_files(tmp_path, monkeypatch, group, run_group):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    log_two_roles(tmp_path, "wandb", {"base_url": "http://wandb.invalid:8080"}, group=group)
    run_files = sorted((tmp_path / "monitor" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 2
    runs = {}
    for path in run_files:
        records = read_finished_run(path)
        (run,) = [record.run for record in records if record.WhichOneof("record_type") == "run"]
        history = [
            {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            for record in records
            if record.WhichOneof("record_type") == "history"
        ]
        runs[run.display_name] = (run, history)
    assert set(runs) == {"rising_explorer", "rising_trainer"}
    run, history = runs["rising_explorer"]
    assert run.project == "demo" and run.run_group == run_group and run.job_type == "explorer"
    rewards = [
        (int(row["_step"]), float(row["rollout/reward_mean"]))
        for row in history
        if "rollout/reward_mean" in row
    ]
    assert rewards == [(1, 0.25), (2, 0.5), (3, 0.75)]
    config_keys = {item.key for item in run.config.update}
    assert {"algorithm", "model"} <= config_keys


def read_finished_run(path, timeout_seconds=15.0):
    """wandb's service writes the file asynchronously; wait until the run's exit record is in it."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        records = read_records(path)
        if (
            any(record.WhichOneof("record_type") == "exit" for record in records)
            or time.monotonic() > deadline
        ):
            return records
        time.sleep(0.1)


def test_wandb_mode_without_credentials_is_offline(monkeypatch, tmp_path):
    from trivium.monitor.wandb_monitor import resolve_wandb_mode

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    assert resolve_wandb_mode(None, None, None) == "offline"
    assert resolve_wandb_mode(None, "key123", None) == "online"
    assert resolve_wandb_mode("disabled", "key123", None) == "disabled"
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert resolve_wandb_mode(None, None, None) == "online"
