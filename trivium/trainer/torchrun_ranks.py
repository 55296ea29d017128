"""Trainer ranks started by torchrun: ``torchrun --nproc-per-node N -m trivium run --config FILE``.

torchrun (or any launcher that sets its variables: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) starts the same command N times, on one machine or
several. The process of rank 0 runs the whole run, as ``trivium run`` does alone; the others
wait. When a trainer of ``data_parallel_size`` ranks starts (a stage may have one, the next
several), rank 0's ``TorchrunRanks`` launcher hands each waiting process what a spawned rank
would get (the rendezvous of the trainer's process group, the follower and its settings);
the process runs it until rank 0 closes that trainer, then waits for the next one. At the
end of the run rank 0 releases them and every process exits.

The hand-over goes through the store of torch's ``env://`` rendezvous (the one torchrun's
agent hosts, or rank 0 when no agent does). Rank r computes on ``cuda:LOCAL_RANK``. If rank
0 dies, the waiting processes lose the store and exit with an error, so torchrun ends the job.
A rank that dies or stops answering is rank 0's watch's to name (``rank_watch.py``): it sees
a process of rank 0's machine end at once (and reads how from ``/proc`` before torchrun's
agent reaps it), kills a silent one by its pid, and the run ends with its message naming the
rank and pid; torchrun's agent, seeing the process gone, then stops the job and prints its
own report, which names the same process. A rank on another machine is named by its silence.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from trivium.errors import UserError
from trivium.trainer.rank_group import follower_main
from trivium.trainer.rank_launcher import RankLauncher, Rendezvous

logger = logging.getLogger(__name__)

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
RELEASE = b"release"
# How long a waiting process waits for rank 0's next trainer (a run may explore for days first).
WAIT_FOR_WORK = timedelta(days=30)


@dataclass(frozen=True)
class LaunchedWorld:
    """This process's place among the processes a launcher started."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> LaunchedWorld | None:
        """None for a process started alone (``WORLD_SIZE`` unset or 1). ``environ``: this
        process's environment when not given, looked up at the call, not at import."""
        environ = os.environ if environ is None else environ
        world_size = environ.get("WORLD_SIZE", "1")
        if not world_size.isdigit() or int(world_size) <= 1:
            return None
        missing = [name for name in LAUNCHER_VARIABLES if not environ.get(name)]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise UserError(
                f"trivium run was started as one of {world_size} processes (WORLD_SIZE={world_size}) but "
                f"{', '.join(missing)} {verb} not set; start it with torchrun, which sets {', '.join(LAUNCHER_VARIABLES)}"
            )
        return cls(
            rank=int(environ["RANK"]),
            world_size=int(world_size),
            local_rank=int(environ["LOCAL_RANK"]),
            master_addr=environ["MASTER_ADDR"],
        )


def open_store(world: LaunchedWorld) -> dist.Store:
    """The store every process of the launch shares (blocks until all have joined it)."""
    store, _, _ = next(dist.rendezvous("env://", timeout=WAIT_FOR_WORK))
    return dist.PrefixStore("trivium_trainer_ranks/", store)


class TorchrunRanks(RankLauncher):
    """Rank 0's launcher: ranks 1..N-1 of a trainer are processes torchrun started."""

    def __init__(self, world: LaunchedWorld, store: dist.Store):
        self.world = world
        self.store = store
        self.jobs = {rank: 0 for rank in range(1, world.world_size)}  # next job number of each process

    def rendezvous_address(self) -> str:
        return self.world.master_addr

    def device_index(self, rank: int) -> int:
        return self.world.local_rank  # rank 0's; each other process uses its own LOCAL_RANK

    def launch(
        self, rank: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple
    ) -> str:
        if rank not in self.jobs:
            raise UserError(
                f"trainer.data_parallel_size is {rendezvous.world_size} but torchrun started "
                f"{self.world.world_size} processes; start it with --nproc-per-node (x nodes) >= the trainer's ranks"
            )
        job = f"{rank}/{self.jobs[rank]}"
        self.jobs[rank] += 1
        self.store.set(f"job/{job}", pickle.dumps((rendezvous, follower, follower_args)))
        return job

    def reap(self, handles: list[Any], *, wait: float) -> None:
        if wait <= 0:
            return  # after a failure: the watch killed the ranks' processes, torchrun's agent reaps them
        for job in handles:
            try:
                self.store.wait([f"done/{job}"], timedelta(seconds=wait))
            except Exception:  # a timeout, or the store is gone: nothing more to wait for
                logger.warning("trainer rank job %s did not report done within %.0f s", job, wait)

    def release_all(self) -> None:
        """End of the run: every waiting process returns from ``serve_as_rank``."""
        for rank, number in self.jobs.items():
            self.store.set(f"job/{rank}/{number}", RELEASE)


def serve_as_rank(world: LaunchedWorld, store: dist.Store) -> None:
    """Ranks 1..N-1: run each trainer rank 0 hands over, until it releases this process."""
    number = 0
    while True:
        job = f"{world.rank}/{number}"
        payload = store.get(f"job/{job}")  # blocks until rank 0 sets it
        if payload == RELEASE:
            return
        rendezvous, follower, follower_args = pickle.loads(payload)
        try:
            follower_main(world.rank, world.local_rank, rendezvous, follower, follower_args)
        finally:
            store.set(f"done/{job}", b"1")
        number += 1
