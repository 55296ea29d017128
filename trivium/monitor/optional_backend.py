"""The base of the built-in backends that need an optional package (tensorboard, wandb, mlflow).

It owns what they share when they are built: the keyword arguments the factory passes
(``run_dir``, ``project``, ``run_name``, ``role``, ``monitor_args``, ``config_dict``,
``group``), the error naming the pip extra when the package is missing, and the refusal of
``monitor_args`` keys the backend does not read. A subclass names its package and accepted
arguments and opens its run in ``start``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from trivium.monitor.base import Monitor, check_monitor_args, missing_package_error


@dataclass(frozen=True)
class BackendRun:
    """The run one backend records: where, under which names, and with which settings."""

    run_dir: Path
    project: str
    run_name: str
    role: str
    monitor_args: dict[str, Any]
    config_dict: dict[str, Any] | None
    group: str = ""


class OptionalPackageBackend(Monitor):
    """A backend whose package is an optional extra named like its monitor type."""

    monitor_type: ClassVar[str]  # its name in MONITOR_BACKENDS, the pip extra and the package
    package_module: ClassVar[str]  # the module it imports, e.g. "mlflow.tracking"
    accepted_args: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        run_dir: Path,
        project: str,
        run_name: str,
        role: str,
        monitor_args: dict[str, Any],
        config_dict: dict[str, Any] | None,
        group: str = "",
    ):
        try:
            importlib.import_module(self.package_module)
        except ImportError:
            raise missing_package_error(self.monitor_type, self.monitor_type) from None
        check_monitor_args(self.monitor_type, monitor_args, self.accepted_args)
        self.start(BackendRun(run_dir, project, run_name, role, monitor_args, config_dict, group))

    def start(self, run: BackendRun) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement start(run)")
