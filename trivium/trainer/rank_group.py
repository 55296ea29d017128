"""The ranks of a data-parallel trainer: started, joined in one process group, kept in step.

Rank 0 is the trainer the rest of the runtime talks to. It starts ranks 1..N-1 through a
``RankLauncher``: processes of this machine (``LocalProcesses``, ``torch.multiprocessing``
spawn) by default, Ray actors in the run's placement group when Ray places the run
(``runtime/ray_trainer_ranks.py``), or the processes torchrun started
(``trainer/torchrun_ranks.py``, installed with ``ranks_started_by``). Each rank builds the same ``Trainer`` and then follows
rank 0: every trainer method marked ``@on_every_rank`` that rank 0 runs is first announced to
the others (its name and arguments, broadcast in the trainer's process group), so all ranks
enter the same collectives in the same order. Locally the rendezvous address comes from
``MASTER_ADDR``/``MASTER_PORT`` when set (127.0.0.1 and a free port otherwise).

This module owns the command channel and the local processes only; what a rank computes is
the trainer's business (``trainer.py``, ``data_parallel.py``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trivium.sync.collective import free_port

logger = logging.getLogger(__name__)

CLOSE = "__close__"


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


@dataclass(frozen=True)
class Rendezvous:
    """Where and how the ranks of one trainer meet."""

    address: str
    port: int
    world_size: int
    device_type: str
    timeout: float


class RankLauncher:
    """Starts ranks 1..N-1 of a trainer somewhere, and reaps them when the trainer closes."""

    def rendezvous_address(self) -> str:
        """The host of rank 0 as the other ranks reach it."""
        raise NotImplementedError(f"{type(self).__name__} must implement rendezvous_address()")

    def rendezvous_port(self, address: str) -> int:
        return free_port(address)

    def device_index(self, rank: int) -> int:
        """The GPU index ``rank`` computes on, among the GPUs its process sees."""
        return rank

    def launch(self, rank: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple) -> Any:
        """Start ``rank`` running ``follower(group, *follower_args)``; returns a handle for ``reap``."""
        raise NotImplementedError(f"{type(self).__name__} must implement launch()")

    def reap(self, handles: list[Any], *, wait: float) -> None:
        """Wait up to ``wait`` seconds for the ranks to return, then stop any that did not."""
        raise NotImplementedError(f"{type(self).__name__} must implement reap()")


class LocalProcesses(RankLauncher):
    """Ranks as spawned processes of this machine, rank ``r`` on GPU ``r``."""

    def rendezvous_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    def rendezvous_port(self, address: str) -> int:
        return int(os.environ.get("MASTER_PORT") or free_port(address))

    def launch(self, rank: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple) -> Any:
        process = mp.get_context("spawn").Process(
            target=follower_main,
            args=(rank, self.device_index(rank), rendezvous, follower, follower_args),
            name=f"trainer-rank-{rank}",
            daemon=True,
        )
        process.start()
        return process

    def reap(self, handles: list[Any], *, wait: float) -> None:
        for process in handles:
            process.join(wait)
            if process.is_alive():
                logger.warning("trainer rank process %s did not exit; killing it", process.name)
                process.kill()


_installed_launcher: RankLauncher | None = None


@contextmanager
def ranks_started_by(launcher: RankLauncher) -> Iterator[None]:
    """Trainers built meanwhile without a launcher of their own start their ranks with ``launcher``."""
    global _installed_launcher
    previous, _installed_launcher = _installed_launcher, launcher
    try:
        yield
    finally:
        _installed_launcher = previous


class RankGroup:
    """This process's place among the trainer's ranks; rank 0 also owns the others' launcher."""

    def __init__(self, *, rank: int, world_size: int, device_type: str, device_index: int | None = None,
                 launcher: RankLauncher | None = None, handles: list[Any] | None = None):
        self.rank = rank
        self.world_size = world_size
        self.device_type = device_type
        self.device_index = rank if device_index is None else device_index
        self.launcher = launcher
        self.handles = handles or []
        self.lock = threading.RLock()  # one collective method at a time on rank 0
        self.closed = False

    @property
    def leads(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.device_index) if self.device_type == "cuda" else torch.device("cpu")

    # ------------------------------------------------------------------ start and join
    @classmethod
    def start(cls, *, world_size: int, device_type: str, timeout: float, follower: Callable[..., None],
              follower_args: tuple, launcher: RankLauncher | None = None) -> RankGroup:
        """Rank 0: start ranks 1..N-1 running ``follower(group, *follower_args)`` and join them."""
        launcher = launcher or _installed_launcher or LocalProcesses()
        address = launcher.rendezvous_address()
        rendezvous = Rendezvous(address, launcher.rendezvous_port(address), world_size, device_type, timeout)
        handles: list[Any] = []
        try:
            for rank in range(1, world_size):
                handles.append(launcher.launch(rank, rendezvous, follower, follower_args))
            _join(0, launcher.device_index(0), rendezvous)
        except BaseException:
            launcher.reap(handles, wait=0)
            raise
        return cls(rank=0, world_size=world_size, device_type=device_type, device_index=launcher.device_index(0),
                   launcher=launcher, handles=handles)

    # ------------------------------------------------------------------ commands
    def announce(self, name: str, args: tuple, kwargs: dict) -> None:
        dist.broadcast_object_list([(name, args, kwargs)], src=0)

    def next_command(self) -> tuple[str, tuple, dict]:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()

    def close(self, *, wait: float = 60.0) -> None:
        """Rank 0: release the followers, leave the group and reap the processes."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.leads:
                with self.lock:
                    self.announce(CLOSE, (), {})
        finally:
            dist.destroy_process_group()
            if self.launcher is not None:
                self.launcher.reap(self.handles, wait=wait)


def on_every_rank(method: Callable | None = None, *, leader_only: tuple[str, ...] = ()) -> Callable:
    """Run ``method`` on every rank: rank 0 announces it, the others run it from ``follow``.

    Keyword arguments named in ``leader_only`` (e.g. where rank 0 sends what the ranks
    gather) are passed on rank 0 only; the other ranks run the method without them.
    """

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            group: RankGroup | None = getattr(self, "rank_group", None)
            if group is None or not group.leads:
                return method(self, *args, **kwargs)
            announced = {key: value for key, value in kwargs.items() if key not in leader_only}
            with group.lock:
                group.announce(method.__name__, args, announced)
                return method(self, *args, **kwargs)

        return run

    return decorate(method) if method is not None else decorate


def follow(target: Any, group: RankGroup) -> None:
    """Ranks 1..N-1: run what rank 0 announces on ``target`` until it closes the group."""
    while True:
        name, args, kwargs = group.next_command()
        if name == CLOSE:
            return
        getattr(target, name)(*args, **kwargs)


def _join(rank: int, device_index: int, rendezvous: Rendezvous) -> None:
    if rendezvous.device_type == "cuda":
        torch.cuda.set_device(device_index)
    timeout = timedelta(seconds=rendezvous.timeout)
    # The group's own store, hosted by rank 0. (A tcp:// init_method would look for torchrun's
    # agent store at this address instead when the process runs under torchrun.)
    store = dist.TCPStore(
        rendezvous.address, rendezvous.port, rendezvous.world_size, is_master=rank == 0, timeout=timeout
    )
    dist.init_process_group(
        backend_for(rendezvous.device_type), store=store, rank=rank, world_size=rendezvous.world_size, timeout=timeout
    )


def follower_main(rank: int, device_index: int, rendezvous: Rendezvous, follower: Callable[..., None],
                  follower_args: tuple) -> None:
    """Ranks 1..N-1, in their own process: join the group, then run ``follower`` until rank 0 closes it."""
    _join(rank, device_index, rendezvous)
    group = RankGroup(rank=rank, world_size=rendezvous.world_size, device_type=rendezvous.device_type,
                      device_index=device_index)
    try:
        follower(group, *follower_args)
    except BaseException:
        # The traceback goes to this process's stderr; rank 0 sees its collective fail.
        traceback.print_exc()
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
