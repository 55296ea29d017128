"""Starting or joining Ray for a run, as early as the run knows it will be placed there.

``ray.init`` of a local Ray takes 3-4 s, most of it waiting for Ray's own processes to come
up, while the run's driver has 1-2 s of imports of its own (torch, trivium's runtime).
``trivium run`` therefore starts Ray before it imports the runtime and imports it in a thread
meanwhile (``importing_meanwhile``); the placement then finds Ray running, takes the
connection over (``connect`` does nothing a second time) and shuts it down at the end.

Ray's own log lines ("Started a local Ray instance", its notes on token authentication) are
third-party output: below ``log.level: DEBUG`` only its errors reach the console
(``runtime/quiet_output.py`` quiets the other libraries).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# What a run's driver imports before it builds anything: torch and trivium's runtime.
RUNTIME_MODULE = "trivium.runtime.launcher"


@contextmanager
def ray_started_for(config: Any) -> Iterator[None]:
    """For a run placed on Ray (``config``: its resolved first stage): start or join Ray now,
    importing the runtime meanwhile; the body then finds the runtime imported. Nothing for
    a run in one process."""
    if not config.cluster.uses_ray:
        yield
        return
    import ray  # noqa: F401 - first and alone: importing the runtime beside it slows it down

    with importing_meanwhile(RUNTIME_MODULE):
        connect(config.cluster.ray_address, config.ray_namespace, config.log.level)
    yield


def connect(address: str | None, namespace: str, log_level: str | int) -> None:
    """Join the Ray cluster at ``address``, or start a local Ray without one, unless this
    process is connected already; Ray logs at ``log_level`` if it is DEBUG, errors only otherwise."""
    import ray

    from trivium.monitor.logs import parse_level

    if ray.is_initialized():
        return
    ray_level = logging.DEBUG if parse_level(log_level) <= logging.DEBUG else logging.ERROR
    if address:
        ray.init(address=address, namespace=namespace, log_to_driver=True, logging_level=ray_level)
    else:
        ray.init(namespace=namespace, include_dashboard=False, log_to_driver=True, logging_level=ray_level)


@contextmanager
def importing_meanwhile(module: str) -> Iterator[None]:
    """Import ``module`` in a thread while the body runs; the body's own work (``ray.init``)
    mostly waits. A failed import is left for the next plain import to raise."""

    def load() -> None:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - re-raised by the caller's own import
            return

    thread = threading.Thread(target=load, name=f"import {module}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
