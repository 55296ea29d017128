"""MLflow runs ``<name>_explorer`` / ``<name>_trainer`` in experiment ``<project>``.

The tracking server is ``monitor_args.uri``, else ``MLFLOW_TRACKING_URI``, else a local
store inside the run directory (``<run_dir>/monitor/mlflow/mlflow.db``, artifacts next to
it): MLflow's plain-folder store is frozen upstream, a SQLite file is its local default.
``monitor_args.username`` / ``password`` override ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD``, which MLflow reads for servers with authentication.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trivium.monitor.base import MONITOR_BACKENDS
from trivium.monitor.optional_backend import BackendRun, OptionalPackageBackend

ACCEPTED_ARGS = ("uri", "username", "password")
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit per log_batch request
MAX_PARAMS_PER_BATCH = 100
INVALID_NAME_CHARACTERS = re.compile(r"[^0-9A-Za-z_\-. /]")


def mlflow_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "monitor" / "mlflow"


def local_tracking_uri(run_dir: str | Path) -> str:
    return f"sqlite:///{(mlflow_dir(run_dir) / 'mlflow.db').resolve()}"


@MONITOR_BACKENDS.register("mlflow")
class MlflowMonitor(OptionalPackageBackend):
    monitor_type = "mlflow"
    package_module = "mlflow.tracking"
    accepted_args = ACCEPTED_ARGS

    def start(self, run: BackendRun) -> None:
        from mlflow.tracking import MlflowClient

        monitor_args, run_dir = run.monitor_args, run.run_dir
        # MLflow reads credentials from the environment on every request.
        if monitor_args.get("username"):
            os.environ["MLFLOW_TRACKING_USERNAME"] = str(monitor_args["username"])
        if monitor_args.get("password"):
            os.environ["MLFLOW_TRACKING_PASSWORD"] = str(monitor_args["password"])

        self.tracking_uri = monitor_args.get("uri") or os.environ.get("MLFLOW_TRACKING_URI")
        artifact_location = None
        lock: contextlib.AbstractContextManager = contextlib.nullcontext()
        if not self.tracking_uri:
            mlflow_dir(run_dir).mkdir(parents=True, exist_ok=True)
            self.tracking_uri = local_tracking_uri(run_dir)
            artifact_location = (mlflow_dir(run_dir) / "artifacts").resolve().as_uri()
            # The explorer and the trainer may open the new database at the same moment.
            lock = _file_lock(mlflow_dir(run_dir) / ".init.lock")
        with lock:
            self.client = MlflowClient(tracking_uri=self.tracking_uri)
            experiment_id = self._experiment_id(run.project, artifact_location)
            created = self.client.create_run(
                experiment_id,
                run_name=run.run_name,
                tags={
                    "trivium.role": run.role,
                    "trivium.experiment": run.run_name.removesuffix(f"_{run.role}"),
                    **({"trivium.group": run.group} if run.group else {}),
                },
            )
        self.run_id = created.info.run_id
        if run.config_dict:
            self._log_params(flatten_config(run.config_dict))

    def _experiment_id(self, project: str, artifact_location: str | None) -> str:
        experiment = self.client.get_experiment_by_name(project)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(project, artifact_location=artifact_location)
        except Exception:  # another process created it first
            experiment = self.client.get_experiment_by_name(project)
            if experiment is None:
                raise
            return experiment.experiment_id

    def _log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(mlflow_name(key), value) for key, value in params.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + MAX_PARAMS_PER_BATCH])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        timestamp_ms = int(time.time() * 1000)
        items = [Metric(mlflow_name(key), value, timestamp_ms, step) for key, value in metrics.items()]
        for start in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[start : start + MAX_METRICS_PER_BATCH])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    """MLflow accepts letters, digits, ``_ - . /`` and spaces in names; anything else becomes ``_``."""
    return INVALID_NAME_CHARACTERS.sub("_", key)


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``; values cut to MLflow's parameter length limit."""
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, prefix=f"{name}."))
        else:
            flat[name] = str(value)[:MAX_PARAM_VAL_LENGTH]
    return flat


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
