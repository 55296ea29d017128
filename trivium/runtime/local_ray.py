"""Starting or joining Ray for a run, as early as the run knows it will be placed there.

``ray.init`` of a local Ray takes 3-4 s, most of it waiting for Ray's own processes to come
up, while the run's driver has 1-2 s of imports of its own (torch, trivium's runtime).
``trivium run`` therefore starts Ray before it imports the runtime and imports it in a thread
meanwhile (``importing_meanwhile``); the placement then finds Ray running and, knowing the
run started it (``connect``), shuts it down at the end as if it had started it itself.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Whether the Ray this process is connected to was started by a run of this process.
_started_here = False
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


def connect(address: str | None, namespace: str) -> bool:
    """Join the Ray cluster at ``address``, or start a local Ray without one, unless this
    process is connected already; whether the run started the Ray it is connected to."""
    global _started_here
    import ray

    if not ray.is_initialized():
        if address:
            ray.init(address=address, namespace=namespace, log_to_driver=True)
        else:
            ray.init(namespace=namespace, include_dashboard=False, log_to_driver=True)
            _started_here = True
    return _started_here


def disconnect() -> None:
    """Stop the local Ray the run started, or leave the cluster it joined (which keeps running)."""
    global _started_here
    import ray

    ray.shutdown()
    _started_here = False


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
