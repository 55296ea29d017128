"""A real run with each monitor type writes files that the tool's own reader reads back."""

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config


def _run(assets, tmp_path, monitor_type):
    config = base_config(assets, tmp_path / "runs", **{"monitor.monitor_type": monitor_type})
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    return tmp_path / "runs" / "e2e" / "run"


@pytest.mark.slow
def test_tensorboard_run(assets, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = _run(assets, tmp_path, "tensorboard")
    explorer = EventAccumulator(str(run_dir / "monitor" / "tensorboard" / "run_explorer"))
    explorer.Reload()
    trainer = EventAccumulator(str(run_dir / "monitor" / "tensorboard" / "run_trainer"))
    trainer.Reload()
    logged = [r["rollout/reward_mean"] for r in read_metrics(run_dir) if "rollout/reward_mean" in r]
    assert [round(e.value, 5) for e in explorer.Scalars("rollout/reward_mean")] == [round(v, 5) for v in logged]
    assert [e.step for e in trainer.Scalars("actor/pg_loss")] == [1, 2]


@pytest.mark.slow
def test_mlflow_run(assets, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from trivium.monitor.mlflow_monitor import local_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = _run(assets, tmp_path, "mlflow")
    client = MlflowClient(tracking_uri=local_tracking_uri(run_dir))
    experiment = client.get_experiment_by_name("e2e")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"run_explorer", "run_trainer"}
    history = client.get_metric_history(runs["run_trainer"].info.run_id, "actor/pg_loss")
    assert [metric.step for metric in history] == [1, 2]


@pytest.mark.slow
def test_wandb_offline_run(assets, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = _run(assets, tmp_path, "wandb")
    run_files = list(run_dir.rglob("offline-run-*/*.wandb"))
    assert len(run_files) == 2  # the explorer's run and the trainer's run
    assert all(path.stat().st_size > 0 for path in run_files)
