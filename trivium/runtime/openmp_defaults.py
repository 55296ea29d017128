"""The OpenMP settings a trivium process starts with, unless the user chose their own.

* ``OMP_NUM_THREADS``: the cores the process may use (``usable_cores``), when a cgroup CPU
  quota makes them fewer than its affinity mask allows. Without it OpenMP, and so torch's
  intra-op thread pool, takes one thread per core of the mask, whatever the quota. The
  processes the run starts (trainer ranks, a local Ray's actors) inherit it. Without a
  quota, torch's own choice (and Ray's per-actor one) is left as it is.
* ``GOMP_SPINCOUNT=30000``: an OpenMP thread that runs out of work spins for about 0.3 ms
  before it sleeps (GNU OpenMP, which torch's Linux wheels use; its own default is about
  3 ms). Between two of torch's parallel regions a thread waits for the Python code in
  between: spinning through that wait keeps a quiet machine fast, and spinning longer takes
  the cores that other work (or the run's own explorer and trainer, or several actors)
  needs. Measured on the quickstart's GRPO step, 2 cores (``benchmarks/contention.py``):
  0.31 s quiet and 0.55 s beside two busy processes, against 0.30 / 0.76 s with OpenMP's
  default, 0.25 / 0.98 s spinning without end (``OMP_WAIT_POLICY=ACTIVE``) and 0.39 / 0.68 s
  never spinning (``OMP_WAIT_POLICY=PASSIVE``).

OpenMP reads both when torch is imported and never again, so ``apply_openmp_defaults`` runs
first thing in the ``trivium`` command; in a process that has imported torch already it only
reaches the processes started later. A value already in the environment is kept, and an
``OMP_WAIT_POLICY`` of the user's leaves the spin count to it.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from trivium.runtime.usable_cores import affinity_cores, usable_cores

# GNU OpenMP's spins before an idle thread sleeps (about 100 per microsecond).
SPIN_COUNT = "30000"


def apply_openmp_defaults(
    environ: MutableMapping[str, str] = os.environ, *, cores: int | None = None, affinity: int | None = None
) -> None:
    """Set ``OMP_NUM_THREADS`` to ``cores`` (by default the usable cores) if that is fewer than
    ``affinity`` (the cores of the affinity mask: OpenMP's own choice), and ``GOMP_SPINCOUNT``,
    in ``environ`` where the user set neither it nor ``OMP_WAIT_POLICY``."""
    cores = cores or usable_cores()
    if not environ.get("OMP_NUM_THREADS") and cores < (affinity or affinity_cores()):
        environ["OMP_NUM_THREADS"] = str(cores)
    if not environ.get("GOMP_SPINCOUNT") and not environ.get("OMP_WAIT_POLICY"):
        environ["GOMP_SPINCOUNT"] = SPIN_COUNT
