"""Watching the ranks of a data-parallel trainer: a dead or silent rank ends the run, named.

Every rank 1..N-1 runs a ``Heartbeat`` thread: it says which process it is (pid and host)
in the group's store, hosted by rank 0, then adds one to its counter there every second.
Rank 0 runs a ``RankWatch`` thread that, twice a second and at once when a rank's process on
this machine ends, asks the launcher whether each rank's process still runs (a local
process's exit code, a Ray actor's state; for a process of this machine that another
launcher started, torchrun's, its state in ``/proc``) and reads each counter. A rank whose
process ended, or whose counter stood still for the group's timeout
(``synchronizer.sync_timeout``: a stopped or starved process), is a ``RankFailure``: the watch
logs it and kills every rank (none can go on without the lost one; killing a stopped rank
is also what ends a collective rank 0 is blocked in). Rank 0's current or next collective
then raises ``ComponentDied`` with the failure's message instead of gloo's error, and the
listeners installed with ``rank_failures_reported_to`` (the run's: it ends at once, whatever
it waits for) get that error too.

A rank that loses rank 0's store (rank 0 died) exits at once, so no rank outlives the run.

This module owns the watching; starting, joining and commanding ranks is ``rank_group.py``'s.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from trivium.errors import ComponentDied, SyncTimeout, UserError

if TYPE_CHECKING:
    from trivium.trainer.rank_launcher import RankLauncher, Rendezvous

logger = logging.getLogger(__name__)  # under trivium.trainer: it reaches log/trainer.log

TIMEOUT_KEY = "synchronizer.sync_timeout"
RESUME = "Resume with continue_from_checkpoint: true."
# How long rank 0 looks for a lost rank behind a failed collective: a killed process closes
# its sockets a moment before its parent can see its exit code.
LOST_RANK_GRACE = 3.0


# Who else hears of a rank failure in this process (the run, which then ends at once).
_failure_listeners: list[Callable[[ComponentDied], None]] = []


@contextmanager
def rank_failures_reported_to(listener: Callable[[ComponentDied], None]) -> Iterator[None]:
    """Within the block, every watch of this process hands the ``ComponentDied`` of a rank it
    lost to ``listener`` too (from the watch's thread, once the ranks were killed)."""
    _failure_listeners.append(listener)
    try:
        yield
    finally:
        _failure_listeners.remove(listener)


def process_key(rank: int) -> str:
    return f"trivium_ranks/process/{rank}"


def heartbeat_key(rank: int) -> str:
    return f"trivium_ranks/heartbeat/{rank}"


def beat_interval(timeout: float) -> float:
    """Seconds between two heartbeats (and between two looks of the watch): several per timeout."""
    return min(1.0, timeout / 10)


def connect_store(rendezvous: Rendezvous, *, hosts: bool = False) -> dist.TCPStore:
    """A connection of this process to the group's store (``hosts``: rank 0 serves it)."""
    return dist.TCPStore(
        rendezvous.address,
        rendezvous.port,
        rendezvous.world_size,
        is_master=hosts,
        timeout=timedelta(seconds=rendezvous.timeout),
        wait_for_workers=False,
    )


def exit_description(exitcode: int) -> str:
    """A process's exit code as words: ``killed by SIGKILL``, ``exited with code 1``."""
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def ended_on_this_machine(pid: int) -> str | None:
    """How a process of this machine that is not this one's child ended, from ``/proc``: None
    while it runs. Its exit status is readable only until its parent reaps it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return "its process ended"
    except OSError:
        return None  # no /proc here: the launcher or the heartbeat tells
    if fields[0] not in ("Z", "X"):  # the third field of stat: the process's state
        return None
    status = int(fields[49])  # the 52nd field: the exit status, as waitpid reports it
    return exit_description(-(status & 0x7F) if status & 0x7F else status >> 8)


def is_lost_peer_error(error: BaseException) -> bool:
    """Could ``error`` be a collective failing because another rank went away? (Rank 0 then looks.)"""
    ours = (UserError, ComponentDied, SyncTimeout, NotImplementedError)
    return isinstance(error, (RuntimeError, dist.DistError)) and not isinstance(error, ours)


def is_transport_error(error: BaseException) -> bool:
    """Raised by the ranks' transport (gloo, nccl, the store), not by what the rank computes."""
    return isinstance(error, dist.DistError) or "third_party/gloo" in str(error)


@dataclass(frozen=True)
class RankProcess:
    pid: int
    host: str

    @classmethod
    def this_one(cls) -> RankProcess:
        return cls(os.getpid(), socket.gethostname())

    @classmethod
    def parse(cls, value: bytes) -> RankProcess:
        pid, host = value.decode().split(" ", 1)
        return cls(int(pid), host)

    def encode(self) -> str:
        return f"{self.pid} {self.host}"

    @property
    def local(self) -> bool:
        return self.host == socket.gethostname()

    def __str__(self) -> str:
        return f"pid {self.pid}" + ("" if self.local else f" on {self.host}")


@dataclass(frozen=True)
class RankFailure:
    rank: int
    message: str


def died(rank: int, process: RankProcess | str, how: str) -> RankFailure:
    return RankFailure(
        rank,
        (
            f"trainer rank {rank} ({process}) died: {how}. Its process was killed or crashed (out of memory, "
            f"say; its own error, if it had one, is in the run's output). The other trainer ranks were stopped. "
            f"{RESUME}"
        ),
    )


def went_silent(
    rank: int, process: RankProcess | str, seconds: float, timeout: float, *, collective_failed: bool = False
) -> RankFailure:
    meanwhile = " while a collective with it failed" if collective_failed else ""
    return RankFailure(
        rank,
        (
            f"trainer rank {rank} ({process}) stopped answering: no heartbeat for {seconds:.0f} s{meanwhile} "
            f"({TIMEOUT_KEY} is {timeout:.0f} s); "
            f"its process was stopped (SIGSTOP, a debugger) or starved of CPU. It was killed, and the other "
            f"trainer ranks with it. {RESUME}"
        ),
    )


class RankWatch:
    """Rank 0's watch over ranks 1..N-1 (``handles[r - 1]`` is rank ``r``'s launcher handle)."""

    def __init__(self, launcher: RankLauncher, handles: list[Any], rendezvous: Rendezvous):
        self.launcher = launcher
        self.handles = handles
        self.timeout = rendezvous.timeout
        self.interval = beat_interval(rendezvous.timeout)
        self.store = connect_store(rendezvous)  # its own connection: the watch thread polls it
        self.processes: dict[int, RankProcess] = {}
        self.beats: dict[int, tuple[int, float]] = {}  # rank -> (count, monotonic time it last changed)
        self.failure: RankFailure | None = None
        # pidfds of the ranks' local processes, readable once one ends, and a pipe ``stop`` writes to
        self.exit_signals: list[int] = []
        self.wake: tuple[int, int] | None = None
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    @property
    def ranks(self) -> range:
        return range(1, len(self.handles) + 1)

    def wait_until_joined(self) -> None:
        """Before the process group forms: every rank's process runs and said who it is."""
        deadline = time.monotonic() + self.timeout
        while True:
            with self.lock:
                self._read_processes()
                self._look_for_exits()
            if self.failure is not None:
                raise ComponentDied(self.failure.message)
            missing = [rank for rank in self.ranks if rank not in self.processes]
            if not missing:
                joined = ", ".join(f"rank {rank} {self.processes[rank]}" for rank in self.ranks)
                logger.info("trainer ranks joined: %s", joined)
                return
            if time.monotonic() > deadline:
                self.kill_all()
                raise ComponentDied(
                    f"trainer rank(s) {', '.join(map(str, missing))} did not start within "
                    f"{self.timeout:.0f} s ({TIMEOUT_KEY}); raise it if starting a rank's process takes "
                    "longer on this machine"
                )
            time.sleep(self.interval / 2)

    def start(self) -> None:
        now = time.monotonic()
        self.beats = {rank: (self.store.add(heartbeat_key(rank), 0), now) for rank in self.ranks}
        for process in self.processes.values():
            if process.local and hasattr(os, "pidfd_open"):
                try:
                    self.exit_signals.append(os.pidfd_open(process.pid))
                except OSError:  # it ended already (the first look names it), or no pidfds here
                    pass
        if self.exit_signals:
            self.wake = os.pipe()
        self.thread = threading.Thread(target=self._run, name="trainer-rank-watch", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Before the ranks are released: a rank that exits from now on is not a failure."""
        self.stopped.set()
        if self.wake is not None:
            os.write(self.wake[1], b"!")
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()
            for descriptor in [*self.exit_signals, *(self.wake or ())]:
                os.close(descriptor)
            self.exit_signals, self.wake = [], None

    def _run(self) -> None:
        while not self._wait_for_next_look():
            try:
                with self.lock:
                    self._read_processes()
                    self._look_for_exits()
                    self._look_for_silence()
            except Exception as error:  # the watch must outlive a bad look; the next one may do
                logger.warning("watching the trainer ranks: %s", error)
            if self.failure is not None:
                return

    def _wait_for_next_look(self) -> bool:
        """Half an interval, or less when a local rank's process ends (its exit status is
        readable only until its parent reaps it); True once the watch was stopped."""
        if self.wake is not None:
            select.select([*self.exit_signals, self.wake[0]], [], [], self.interval / 2)
        else:
            self.stopped.wait(self.interval / 2)
        return self.stopped.is_set()

    def failure_behind_collective(self) -> RankFailure | None:
        """After a collective failed: the rank whose loss made it fail, if a rank was lost.

        A rank that ended is one; so is, now that a collective failed, a rank silent for
        ``LOST_RANK_GRACE`` (several missed heartbeats), even short of the timeout.
        """
        deadline = time.monotonic() + LOST_RANK_GRACE
        while True:
            with self.lock:
                if self.failure is None:
                    self._read_processes()
                    self._look_for_exits()
                if self.failure is None and self.beats:
                    self._look_for_silence(LOST_RANK_GRACE)
            if self.failure is not None or time.monotonic() >= deadline:
                return self.failure
            time.sleep(0.05)

    def kill_all(self) -> None:
        """Kill every rank's process, by its launcher or, on this machine, by its pid."""
        for rank, handle in zip(self.ranks, self.handles):
            try:
                if self.launcher.kill(handle):
                    continue
            except Exception as error:
                logger.warning("killing trainer rank %d through its launcher: %s", rank, error)
            process = self.processes.get(rank)
            if process is not None and process.local:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # ------------------------------------------------------------------ looks (with the lock held)
    def _read_processes(self) -> None:
        for rank in self.ranks:
            if rank not in self.processes and self.store.check([process_key(rank)]):
                self.processes[rank] = RankProcess.parse(self.store.get(process_key(rank)))

    def _described(self, rank: int) -> RankProcess | str:
        known = self.processes.get(rank)
        if known is not None:
            return known
        pid = self.launcher.process_id(self.handles[rank - 1])
        return f"pid {pid}" if pid is not None else "pid unknown"

    def _look_for_exits(self) -> None:
        for rank, handle in zip(self.ranks, self.handles):
            how = self.launcher.exit_status(handle)
            process = self.processes.get(rank)
            if how is None and process is not None and process.local:
                how = ended_on_this_machine(process.pid)  # a launcher that cannot tell (torchrun's)
            if how is not None:
                self._fail(died(rank, self._described(rank), how))
                return

    def _look_for_silence(self, limit: float | None = None) -> None:
        """A rank whose heartbeat count stood still for ``limit`` seconds (after a failed collective;
        the timeout otherwise) failed."""
        now = time.monotonic()
        for rank in self.ranks:
            count = self.store.add(heartbeat_key(rank), 0)
            last_count, changed = self.beats[rank]
            if count != last_count:
                self.beats[rank] = (count, now)
            elif now - changed > (self.timeout if limit is None else limit):
                self._fail(
                    went_silent(
                        rank,
                        self._described(rank),
                        now - changed,
                        self.timeout,
                        collective_failed=limit is not None,
                    )
                )
                return

    def _fail(self, failure: RankFailure) -> None:
        if self.failure is None:
            self.failure = failure
            logger.error("%s", failure.message)
            self.kill_all()
            for listener in _failure_listeners:
                listener(ComponentDied(failure.message))


class Heartbeat:
    """A rank's proof of life, from its own thread; losing rank 0's store ends the process."""

    def __init__(self, rendezvous: Rendezvous, rank: int, *, on_lost: Callable[[str], None] | None = None):
        self.rank = rank
        self.interval = beat_interval(rendezvous.timeout)
        self.store = connect_store(rendezvous)
        self.store.set(process_key(rank), RankProcess.this_one().encode())
        self.on_lost = on_lost or self._exit
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"trainer-rank-{rank}-heartbeat", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.store.add(heartbeat_key(self.rank), 1)
            except Exception as error:
                if not self.stopped.is_set():
                    self.on_lost(str(error).splitlines()[0] if str(error) else type(error).__name__)
                return
            if self.stopped.wait(self.interval):
                return

    def _exit(self, reason: str) -> None:
        print(
            f"trainer rank {self.rank} (pid {os.getpid()}): lost rank 0's store ({reason}); rank 0 died or "
            "cannot be reached, so this rank exits",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
