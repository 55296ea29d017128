"""The ranks of a data-parallel trainer: started, joined in one process group, kept in step.

Rank 0 is the trainer the rest of the runtime talks to. It starts ranks 1..N-1 as processes
(``torch.multiprocessing``, spawn) on this machine; each builds the same ``Trainer`` and then
follows rank 0: every trainer method marked ``@on_every_rank`` that rank 0 runs is first
announced to the others (its name and arguments, broadcast in the trainer's process group),
so all ranks enter the same collectives in the same order. The rendezvous address comes
from ``MASTER_ADDR``/``MASTER_PORT`` when set (127.0.0.1 and a free port otherwise).

This module owns the processes and the command channel only; what a rank computes is the
trainer's business (``trainer.py``, ``data_parallel.py``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

logger = logging.getLogger(__name__)

CLOSE = "__close__"


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


class RankGroup:
    """This process's place among the trainer's ranks; rank 0 also owns the other processes."""

    def __init__(self, *, rank: int, world_size: int, device_type: str, processes: list[Any] | None = None):
        self.rank = rank
        self.world_size = world_size
        self.device_type = device_type
        self.processes = processes or []
        self.lock = threading.RLock()  # one collective method at a time on rank 0
        self.closed = False

    @property
    def leads(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.rank) if self.device_type == "cuda" else torch.device("cpu")

    # ------------------------------------------------------------------ start and join
    @classmethod
    def start(cls, *, world_size: int, device_type: str, timeout: float, follower: Callable[..., None],
              follower_args: tuple) -> RankGroup:
        """Rank 0: start ranks 1..N-1 running ``follower(group, *follower_args)`` and join them."""
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT") or _free_port(address))
        context = mp.get_context("spawn")
        processes = []
        for rank in range(1, world_size):
            process = context.Process(
                target=_follower_main,
                args=(rank, world_size, device_type, address, port, timeout, follower, follower_args),
                name=f"trainer-rank-{rank}",
                daemon=True,
            )
            process.start()
            processes.append(process)
        try:
            _join(0, world_size, device_type, address, port, timeout)
        except BaseException:
            for process in processes:
                process.kill()
            raise
        return cls(rank=0, world_size=world_size, device_type=device_type, processes=processes)

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
            for process in self.processes:
                process.join(wait)
                if process.is_alive():
                    logger.warning("trainer rank process %s did not exit; killing it", process.name)
                    process.kill()


def on_every_rank(method: Callable) -> Callable:
    """Run ``method`` on every rank: rank 0 announces it, the others run it from ``follow``."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        group: RankGroup | None = getattr(self, "rank_group", None)
        if group is None or not group.leads:
            return method(self, *args, **kwargs)
        with group.lock:
            group.announce(method.__name__, args, kwargs)
            return method(self, *args, **kwargs)

    return run


def follow(target: Any, group: RankGroup) -> None:
    """Ranks 1..N-1: run what rank 0 announces on ``target`` until it closes the group."""
    while True:
        name, args, kwargs = group.next_command()
        if name == CLOSE:
            return
        getattr(target, name)(*args, **kwargs)


def _join(rank: int, world_size: int, device_type: str, address: str, port: int, timeout: float) -> None:
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend_for(device_type),
        init_method=f"tcp://{address}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout),
    )


def _follower_main(rank, world_size, device_type, address, port, timeout, follower, follower_args) -> None:
    _join(rank, world_size, device_type, address, port, timeout)
    group = RankGroup(rank=rank, world_size=world_size, device_type=device_type)
    try:
        follower(group, *follower_args)
    except BaseException:
        # The traceback goes to this process's stderr; rank 0 sees its collective fail.
        traceback.print_exc()
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
