"""Starting or joining Ray for a run, as early as the run knows it will be placed there.

``ray.init`` of a local Ray takes 3-4 s, most of it waiting for Ray's own processes to come
up, while the run's driver has 1-2 s of imports of its own (torch, trivium's runtime).
``trivium run`` therefore starts Ray before it imports the runtime and imports it in a thread
meanwhile (``importing_meanwhile``); the placement then finds Ray running, takes the
connection over (``connect`` does nothing a second time) and shuts it down at the end.
"""

from __future__ import annotations

import importlib
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
    with importing_meanwhile(RUNTIME_MODULE):
        connect(config.cluster.ray_address, config.ray_namespace)
    yield


def connect(address: str | None, namespace: str) -> None:
    """Join the Ray cluster at ``address``, or start a local Ray without one, unless this
    process is connected already."""
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace=namespace, log_to_driver=True)
    else:
        ray.init(namespace=namespace, include_dashboard=False, log_to_driver=True)


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
