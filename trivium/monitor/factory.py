"""The one factory the runtime calls: ``create_monitor`` returns a ``MonitorGroup``.

The console line and ``metrics.jsonl`` are always on, plus one optional backend chosen by
``monitor.monitor_type``. The explorer and the trainer each create their own group; their
backend runs are named ``<name>_explorer`` and ``<name>_trainer``. Backends import their
package only when chosen.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trivium.core.metric_names import ROLES
from trivium.errors import UserError
from trivium.monitor.base import MONITOR_BACKENDS, Monitor, MonitorGroup
from trivium.monitor.console_monitor import ConsoleMonitor
from trivium.monitor.metrics_file import MetricsFileMonitor
from trivium.registry import RegistryError

NO_BACKEND = "none"


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
            raise UserError(
                f"group: the monitor type '{backend_type}' takes no group of runs; remove the top-level group key"
            )
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


def _backend_class(monitor_type: str) -> type[Monitor]:
    try:
        return MONITOR_BACKENDS.get(monitor_type)
    except RegistryError as error:
        raise UserError(
            f"monitor.monitor_type: {error} Use '{NO_BACKEND}' to keep only the console and metrics.jsonl."
        ) from None
