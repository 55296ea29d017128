"""The monitor interface: ``Monitor``, the ``MonitorGroup`` that fans a step out, and the
``MONITOR_BACKENDS`` registry optional backends register in. ``factory.py`` builds a role's group.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from numbers import Real
from pathlib import Path
from typing import Any

from trivium.errors import UserError
from trivium.registry import Registry

logger = logging.getLogger(__name__)


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


def check_monitor_args(monitor_type: str, monitor_args: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    """A backend's ``monitor_args`` are the ones it reads: any other key is an error, not ignored."""
    unknown = sorted(set(monitor_args) - set(accepted))
    if unknown:
        takes = f"accepted keys: {', '.join(accepted)}" if accepted else "it takes none"
        raise UserError(f"monitor.monitor_args: {unknown} not understood by the {monitor_type} monitor; {takes}")


def missing_package_error(package: str, extra: str) -> UserError:
    return UserError(
        f"monitor.monitor_type '{extra}' needs the '{package}' package, which is not installed. "
        f"Install it with: pip install 'trivium[{extra}]' (or set monitor.monitor_type to 'none')."
    )
