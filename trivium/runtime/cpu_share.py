"""Sharing a CPU's cores between the explorer and the trainer in ``both`` mode.

Both run at once, each in its own thread, and each would use every core: four busy threads
on two cores, and libgomp cutting its spin-waits short because it manages more threads than
there are cores. Giving each side its own share of the cores is faster (on 2 cores, one step
of the benchmark's GRPO run: 0.24 s shared, 0.18 s split). The run settings give the trainer
and the hf engine their shares; under OpenMP, torch's thread count is per OS thread, so each
sets its own in the thread that computes, and the launcher restores the default afterwards.
The cores split are the ones the process may use (``usable_cores``: affinity and cgroup
quota), not the machine's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from trivium.runtime.usable_cores import usable_cores


def split_cores(total: int | None = None) -> tuple[int, int]:
    """(trainer threads, explorer threads) of ``total`` cores (by default the usable ones): the
    trainer gets the larger half."""
    total = max(1, total or usable_cores())
    return max(1, total - total // 2), max(1, total // 2)


@contextmanager
def restored_torch_threads() -> Iterator[None]:
    """torch.set_num_threads in a worker thread also changes the default for threads made later."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
