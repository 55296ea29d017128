"""The monitor interface and the one factory the runtime calls.

``create_monitor`` returns a ``MonitorGroup``: the console line and ``metrics.jsonl`` are
always on, plus one optional backend chosen by ``monitor.monitor_type``. The explorer and
the trainer each create their own group; their backend runs are named ``<name>_explorer``
and ``<name>_trainer``. Backends import their package only when chosen.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from numbers import Real
from pathlib import Path
from typing import Any

from trivium.errors import UserError
from trivium.monitor.metric_names import ROLES
from trivium.registry import Registry, RegistryError

logger = logging.getLogger(__name__)

NO_BACKEND = "none"


class Monitor:
    """Receives the metrics of one step. Subclasses override ``log`` and, if needed, ``close``."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement log(metrics, step)")

    def close(self) -> None:
        pass


# Backends are built with keyword arguments:
#   run_dir, project, run_name, role, monitor_args, config_dict
# and ``group`` (the config's top-level ``group``, "" when unset) if their __init__ takes it.
# A user plugs in another one with a dotted path, e.g. ``monitor_type: my_pkg.monitors:MyMonitor``.
MONITOR_BACKENDS: Registry[type[Monitor]] = Registry(
    "monitor type",
    builtin_modules=(
        "trivium.monitor.tensorboard_monitor",
        "trivium.monitor.wandb_monitor",
        "trivium.monitor.mlflow_monitor",
    ),
)


class MonitorGroup(Monitor):
    """Fans one step's metrics out to several monitors; closes all of them even if one fails."""

    def __init__(
        self, monitors: list[Monitor], *, run_dir: Path | None = None, export_timeline: bool = False
    ):
        self.monitors = list(monitors)
        self.run_dir = run_dir
        self.export_timeline = export_timeline
        self._closed = False

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self._closed:
            raise RuntimeError("MonitorGroup.log called after close()")
        values = to_float_metrics(metrics)
        if not values:
            return
        for monitor in self.monitors:
            monitor.log(values, int(step))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.export_timeline and self.run_dir is not None:
            from trivium.monitor.timeline import export_ray_timeline

            export_ray_timeline(self.run_dir)
        first_error: BaseException | None = None
        for monitor in self.monitors:
            try:
                monitor.close()
            except Exception as error:  # keep closing the others; report the first failure
                logger.exception("closing %s failed", type(monitor).__name__)
                first_error = first_error or error
        if first_error is not None:
            raise first_error

    def __enter__(self) -> MonitorGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def to_float_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Turn ints, numpy scalars and 0-d tensors into floats; a non-number names its key."""
    values: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(key, str):
            raise TypeError(f"metric {key!r}: keys must be strings and values numbers, got {value!r}")
        if isinstance(value, Real):
            values[key] = float(value)
            continue
        try:
            values[key] = float(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError) as error:
            raise TypeError(f"metric {key!r} is not a number: {value!r}") from error
    return values


def run_name_for(name: str, role: str) -> str:
    """The explorer and the trainer are two runs of one experiment."""
    return f"{name}_{role}"


def create_monitor(
    *,
    run_dir: str | Path,
    project: str,
    name: str,
    role: str,
    monitor_type: str = NO_BACKEND,
    monitor_args: Mapping[str, Any] | None = None,
    config_dict: Mapping[str, Any] | None = None,
    group: str = "",
    enable_ray_timeline: bool = False,
    console: Any = None,
) -> MonitorGroup:
    """Build the monitors of one role (``explorer`` or ``trainer``).

    ``group`` names a group of related runs for backends that take one (wandb's run group,
    an MLflow tag, a TensorBoard folder); a backend that does not take it refuses a set one.
    ``console`` is an optional ``rich.console.Console`` (tests pass one that records);
    ``enable_ray_timeline`` writes ``<run_dir>/monitor/timeline.json`` when the group closes.
    """
    from trivium.monitor.console_monitor import ConsoleMonitor
    from trivium.monitor.metrics_file import MetricsFileMonitor

    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    run_dir = Path(run_dir)
    backend_type = (monitor_type or NO_BACKEND).strip()
    if not any(separator in backend_type for separator in ".:"):
        backend_type = backend_type.lower()  # built-in names are case-insensitive, dotted paths are not
    backend_class = _backend_class(backend_type) if backend_type != NO_BACKEND else None
    monitors: list[Monitor] = [ConsoleMonitor(role, console=console), MetricsFileMonitor(run_dir, role)]
    fan_out = MonitorGroup(monitors, run_dir=run_dir, export_timeline=enable_ray_timeline)
    if backend_class is not None:
        kwargs: dict[str, Any] = {}
        if _takes_keyword(backend_class, "group"):
            kwargs["group"] = group
        elif group:
            raise UserError(f"group: the monitor type '{backend_type}' takes no group of runs; remove the top-level group key")
        try:
            backend = backend_class(
                run_dir=run_dir,
                project=project,
                run_name=run_name_for(name, role),
                role=role,
                monitor_args=dict(monitor_args or {}),
                config_dict=dict(config_dict) if config_dict is not None else None,
                **kwargs,
            )
        except BaseException:
            fan_out.export_timeline = False
            fan_out.close()  # release metrics.jsonl before reporting the failure
            raise
        fan_out.monitors.append(backend)
    return fan_out


def _takes_keyword(backend_class: type[Monitor], name: str) -> bool:
    try:
        return name in inspect.signature(backend_class).parameters
    except (TypeError, ValueError):
        return False


def check_monitor_args(monitor_type: str, monitor_args: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    """A backend's ``monitor_args`` are the ones it reads: any other key is an error, not ignored."""
    unknown = sorted(set(monitor_args) - set(accepted))
    if unknown:
        takes = f"accepted keys: {', '.join(accepted)}" if accepted else "it takes none"
        raise UserError(f"monitor.monitor_args: {unknown} not understood by the {monitor_type} monitor; {takes}")


def _backend_class(monitor_type: str) -> type[Monitor]:
    try:
        return MONITOR_BACKENDS.get(monitor_type)
    except RegistryError as error:
        raise UserError(
            f"monitor.monitor_type: {error} Use '{NO_BACKEND}' to keep only the console and metrics.jsonl."
        ) from None


def missing_package_error(package: str, extra: str) -> UserError:
    return UserError(
        f"monitor.monitor_type '{extra}' needs the '{package}' package, which is not installed. "
        f"Install it with: pip install 'trivium[{extra}]' (or set monitor.monitor_type to 'none')."
    )
