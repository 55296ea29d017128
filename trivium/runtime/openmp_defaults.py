"""The OpenMP settings a trivium process starts with, unless the user chose their own.

* ``OMP_NUM_THREADS``: the cores the process may use (``usable_cores``), when a cgroup CPU
  quota makes them fewer than its affinity mask allows. Without it OpenMP, and so torch's
  intra-op thread pool, takes one thread per core of the mask, whatever the quota. The
  processes the run starts (trainer ranks, a local Ray's actors) inherit it. Without a
  quota, torch's own choice (and Ray's per-actor one) is left as it is.
* ``OMP_WAIT_POLICY=PASSIVE``: an OpenMP thread that runs out of work sleeps at once instead
  of spinning on its core for a while first. On a CPU shared with other work (or with the
  run's own explorer and trainer, or several actors) spinning threads take the cores the
  working ones need.

OpenMP reads both when torch is imported and never again, so ``apply_openmp_defaults`` runs
first thing in the ``trivium`` command; in a process that has imported torch already it only
reaches the processes started later. A value already in the environment is kept
(``OMP_WAIT_POLICY=ACTIVE`` brings spinning back).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from trivium.runtime.usable_cores import affinity_cores, usable_cores


def apply_openmp_defaults(
    environ: MutableMapping[str, str] = os.environ, *, cores: int | None = None, affinity: int | None = None
) -> None:
    """Set ``OMP_NUM_THREADS`` to ``cores`` (by default the usable cores) if that is fewer than
    ``affinity`` (the cores of the affinity mask: OpenMP's own choice), and
    ``OMP_WAIT_POLICY=PASSIVE``, in ``environ`` where they are not set."""
    cores = cores or usable_cores()
    if not environ.get("OMP_NUM_THREADS") and cores < (affinity or affinity_cores()):
        environ["OMP_NUM_THREADS"] = str(cores)
    if not environ.get("OMP_WAIT_POLICY"):
        environ["OMP_WAIT_POLICY"] = "PASSIVE"
