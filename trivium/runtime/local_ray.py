"""Starting or joining Ray for a run, as early as the run knows it will be placed there.

``ray.init`` of a local Ray takes 2.5-4 s, most of it waiting for Ray's own processes to come
up, while the run's driver has 1-2 s of imports of its own (torch, trivium's runtime).
``trivium run`` therefore starts Ray before it imports the runtime and imports it in a thread
meanwhile (``importing_meanwhile``); the placement then finds Ray running, takes the
connection over (``connect`` does nothing a second time) and shuts it down at the end.

A local Ray's raylet connects to its own object store, which a thread of the raylet starts
beside it; when the store is not listening yet, Ray's client retries after a second. On a
2-core machine that happened in 5 local starts of 8 and cost 1.0 s of the 8.6 s to a Ray run's
first step; ``LOCAL_RAY_SYSTEM_CONFIG`` retries every 20 ms within the same 10 s. A cluster
the run joins keeps its own settings.

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

# Ray's client-to-raylet connection (the raylet's own connection to its object store among
# them): 500 attempts 20 ms apart, for Ray's default of 10 attempts 1 s apart.
LOCAL_RAY_SYSTEM_CONFIG = {
    "raylet_client_num_connect_attempts": 500,
    "raylet_client_connect_timeout_milliseconds": 20,
}


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
        ray.init(
            namespace=namespace,
            include_dashboard=False,
            log_to_driver=True,
            logging_level=ray_level,
            _system_config=LOCAL_RAY_SYSTEM_CONFIG,
        )


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
