"""The ranks of a data-parallel trainer: started, joined in one process group, kept in step.

Rank 0 is the trainer the rest of the runtime talks to. It starts ranks 1..N-1 through a
``RankLauncher``: processes of this machine (``LocalProcesses``, ``torch.multiprocessing``
spawn) by default, Ray actors in the run's placement group when Ray places the run
(``runtime/ray_trainer_ranks.py``), or the processes torchrun started
(``trainer/torchrun_ranks.py``, installed with ``ranks_started_by``). Each rank builds the same
``Trainer`` and then follows rank 0: every trainer method marked ``@on_every_rank`` that rank
0 runs is first announced to the others (its name and arguments, broadcast in the trainer's
process group), so all ranks enter the same collectives in the same order. Between two
methods the others wait on the group's store, which rank 0 hosts, not in a collective, so a
long pause (the explorer's turn) is never a collective timeout. Locally the rendezvous
address comes from ``MASTER_ADDR``/``MASTER_PORT`` when set (127.0.0.1 and a free port
otherwise).

While the group lives, rank 0 watches the others (``rank_watch.py``): a rank that dies or
stops answering ends rank 0's collectives with ``ComponentDied`` naming it, and the other
ranks are killed; within a run, the run ends at once, whatever it waits for. Every
collective waits at most the group's timeout (``synchronizer.sync_timeout``).

This module owns the command channel and the local processes only; what a rank computes is
the trainer's business (``trainer.py``, ``data_parallel.py``).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trivium.errors import ComponentDied
from trivium.sync.collective import free_port
from trivium.trainer.rank_launcher import RankLauncher, Rendezvous
from trivium.trainer.rank_watch import (
    Heartbeat,
    RankWatch,
    connect_store,
    exit_description,
    is_lost_peer_error,
    is_transport_error,
)

logger = logging.getLogger(__name__)

CLOSE = "__close__"
# How long ranks 1..N-1 wait on the store for rank 0's next method (a run may explore for days
# between two training steps); a dead rank 0 ends the wait at once.
WAIT_FOR_COMMAND = timedelta(days=30)


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def command_key(number: int) -> str:
    return f"trivium_ranks/command/{number}"


class LocalProcesses(RankLauncher):
    """Ranks as spawned processes of this machine, rank ``r`` on GPU ``r``."""

    def rendezvous_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    def rendezvous_port(self, address: str) -> int:
        return int(os.environ.get("MASTER_PORT") or free_port(address))

    def launch(
        self, rank: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple
    ) -> Any:
        process = mp.get_context("spawn").Process(
            target=local_rank_main,
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
                self.kill(process)

    def exit_status(self, handle: Any) -> str | None:
        return None if handle.exitcode is None else exit_description(handle.exitcode)

    def process_id(self, handle: Any) -> int | None:
        return handle.pid

    def kill(self, handle: Any) -> bool:
        if handle.is_alive():
            handle.kill()  # SIGKILL: it ends a stopped process too
        handle.join(5.0)
        return True


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
    """This process's place among the trainer's ranks; rank 0 also owns the others' launcher and watch."""

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        device_type: str,
        device_index: int | None = None,
        launcher: RankLauncher | None = None,
        handles: list[Any] | None = None,
        store: dist.Store | None = None,
        watch: RankWatch | None = None,
    ):
        self.rank = rank
        self.world_size = world_size
        self.device_type = device_type
        self.device_index = rank if device_index is None else device_index
        self.launcher = launcher
        self.handles = handles or []
        self.store = store  # rank 0 hosts it; it lives as long as the group
        self.watch = watch
        self.commands = 0  # methods announced (rank 0) or received (the others)
        self.lock = threading.RLock()  # one collective method at a time on rank 0
        self.out_of_step = False  # rank 0 raised inside a method the others may still be running
        self.closed = False

    @property
    def leads(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.device_index) if self.device_type == "cuda" else torch.device("cpu")

    # ------------------------------------------------------------------ start and join
    @classmethod
    def start(
        cls,
        *,
        world_size: int,
        device_type: str,
        timeout: float,
        follower: Callable[..., None],
        follower_args: tuple,
        launcher: RankLauncher | None = None,
    ) -> RankGroup:
        """Rank 0: start ranks 1..N-1 running ``follower(group, *follower_args)`` and join them."""
        launcher = launcher or _installed_launcher or LocalProcesses()
        address = launcher.rendezvous_address()
        rendezvous = Rendezvous(address, launcher.rendezvous_port(address), world_size, device_type, timeout)
        store = connect_store(rendezvous, hosts=True)
        handles: list[Any] = []
        watch: RankWatch | None = None
        try:
            for rank in range(1, world_size):
                handles.append(launcher.launch(rank, rendezvous, follower, follower_args))
            watch = RankWatch(launcher, handles, rendezvous)
            watch.wait_until_joined()
            try:
                _init_process_group(0, launcher.device_index(0), rendezvous, store)
            except Exception as error:
                failure = watch.failure_behind_collective() if is_lost_peer_error(error) else None
                if failure is None:
                    raise
                raise ComponentDied(failure.message) from None
            watch.start()
        except BaseException:
            if watch is not None:
                watch.stop()
                watch.kill_all()
            launcher.reap(handles, wait=0)
            raise
        return cls(
            rank=0,
            world_size=world_size,
            device_type=device_type,
            device_index=launcher.device_index(0),
            launcher=launcher,
            handles=handles,
            store=store,
            watch=watch,
        )

    # ------------------------------------------------------------------ commands
    def announce(self, name: str, args: tuple, kwargs: dict) -> None:
        self.commands += 1
        self.store.set(command_key(self.commands), b"")  # wakes the others for the broadcast
        dist.broadcast_object_list([(name, args, kwargs)], src=0)

    def next_command(self) -> tuple[str, tuple, dict]:
        self.commands += 1
        self.store.wait([command_key(self.commands)], WAIT_FOR_COMMAND)
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()

    @contextmanager
    def naming_lost_ranks(self) -> Iterator[None]:
        """Rank 0: collectives inside raise ``ComponentDied`` naming a lost rank, not gloo's error."""
        if self.watch is None:
            yield
            return
        self.raise_if_lost()
        try:
            yield
        except BaseException as error:  # an interrupted method leaves the others mid-way too
            self.out_of_step = True
            # Rank 0's own error (a bad input, say) is the cause even if the others then died of the same.
            failure = self.watch.failure_behind_collective() if is_lost_peer_error(error) else None
            if failure is None:
                raise
            logger.debug("the collective's own error: %s", error)
            raise ComponentDied(failure.message) from None

    def raise_if_lost(self) -> None:
        """Rank 0: a rank the watch has lost ends the caller now, named, without waiting for a
        collective to fail (the trainer between steps, waiting for experiences)."""
        if self.watch is not None and self.watch.failure is not None:
            raise ComponentDied(self.watch.failure.message)

    @contextmanager
    def leading_set_up(self) -> Iterator[None]:
        """Rank 0 building its models with the others: a lost rank is named, and a failure ends the group."""
        try:
            with self.naming_lost_ranks():
                yield
        except BaseException:
            self.close()
            raise

    def close(self, *, wait: float = 60.0) -> None:
        """Rank 0: release the followers (after a failure: kill them), leave the group, reap the processes.

        A method still running on another thread gets ``wait`` seconds to end; after that it is
        taken as stuck, and the followers are killed, which also ends its collectives.
        """
        if self.closed:
            return
        self.closed = True
        released = False
        try:
            if self.leads and self.lock.acquire(timeout=wait):
                try:
                    if not self._failed():
                        if self.watch is not None:
                            self.watch.stop()  # from here on a rank that exits is not a failure
                        self.announce(CLOSE, (), {})
                        released = True
                finally:
                    self.lock.release()
            elif self.leads:
                logger.warning(
                    "a trainer method still ran on another thread after %.0f s; killing the ranks", wait
                )
        except Exception as error:
            logger.warning("releasing the trainer ranks failed (%s); killing them", error)
        finally:
            if self.watch is not None:
                self.watch.stop()
                if not released:
                    self.watch.kill_all()
            dist.destroy_process_group()
            if self.launcher is not None:
                self.launcher.reap(self.handles, wait=wait if released else 0)

    def _failed(self) -> bool:
        return self.out_of_step or (self.watch is not None and self.watch.failure is not None)


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
            with group.lock, group.naming_lost_ranks():
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


def _init_process_group(rank: int, device_index: int, rendezvous: Rendezvous, store: dist.Store) -> None:
    if rendezvous.device_type == "cuda":
        torch.cuda.set_device(device_index)
    # The group's own store, hosted by rank 0. (A tcp:// init_method would look for torchrun's
    # agent store at this address instead when the process runs under torchrun.)
    dist.init_process_group(
        backend_for(rendezvous.device_type),
        store=store,
        rank=rank,
        world_size=rendezvous.world_size,
        timeout=timedelta(seconds=rendezvous.timeout),
    )


def follower_main(
    rank: int, device_index: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple
) -> None:
    """Ranks 1..N-1, in their own process: join the group, then run ``follower`` until rank 0 closes it."""
    store = connect_store(rendezvous)
    heartbeat = Heartbeat(rendezvous, rank)  # from here on rank 0 knows this process and watches it
    try:
        _init_process_group(rank, device_index, rendezvous, store)
        group = RankGroup(
            rank=rank,
            world_size=rendezvous.world_size,
            device_type=rendezvous.device_type,
            device_index=device_index,
            store=store,
        )
        follower(group, *follower_args)
    except BaseException as error:
        if is_transport_error(error):
            # Another rank went away: rank 0 names it; this rank's traceback would only repeat gloo's error.
            first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
            print(
                f"trainer rank {rank} (pid {os.getpid()}): a collective failed ({first_line})",
                file=sys.stderr,
                flush=True,
            )
        else:
            traceback.print_exc()  # this process's stderr; rank 0 sees the rank end and names it
        raise
    finally:
        heartbeat.stop()
        if dist.is_initialized():
            dist.destroy_process_group()


def local_rank_main(
    rank: int, device_index: int, rendezvous: Rendezvous, follower: Callable[..., None], follower_args: tuple
) -> None:
    """A rank as a spawned process: Ctrl-C is rank 0's to handle (it stops the run between steps)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        follower_main(rank, device_index, rendezvous, follower, follower_args)
    except Exception:
        sys.exit(1)  # follower_main printed what went wrong
