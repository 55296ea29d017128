"""The ``queue`` storage: a bounded in-memory experience queue, optionally mirrored to disk.

Owns ``ExperienceQueue`` (thread-safe; async callers go through worker threads), its
reader/writer pair, and the process-wide table of queues by name, so an explorer and a
trainer in one process that name the same buffer share one queue.

Without replay, experiences are read once, first in first out, and ``write`` blocks while
the queue holds ``capacity`` experiences (no limit when it is None). With replay (see ``replay.py``) the highest
priority is read first; a read experience comes back after ``reuse_cooldown_time`` seconds
with its ``use_count`` raised, and when more than ``capacity`` are held the lowest-priority
ones are dropped. Once every writer has finished, readers get what is still available,
nothing is scheduled for reuse any more, and then ``BufferExhausted`` is raised.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trivium.buffer.base import BufferExhausted, BufferWriter, Restored, WaitingReader
from trivium.buffer.queue_mirror import QueueMirror, open_mirror
from trivium.buffer.replay import ReplayPolicy
from trivium.core.experience import Experience
from trivium.errors import UserError

if TYPE_CHECKING:
    from trivium.config.schema import StorageConfig



@dataclass(order=True)
class _Entry:
    sort_key: tuple[float, int]  # (-priority, arrival order): heapq pops the best first
    experience: Experience = field(compare=False)
    use_count: int = field(default=0, compare=False)


class ExperienceQueue:
    def __init__(
        self,
        name: str,
        capacity: int | None = None,
        replay: ReplayPolicy | None = None,
        mirror: QueueMirror | None = None,
    ):
        if capacity is not None and capacity <= 0:
            raise UserError(f"Queue '{name}': capacity must be a positive integer, got {capacity}")
        self.name = name
        self.capacity = capacity
        self.replay = replay
        self.mirror = mirror
        self._condition = threading.Condition()
        self._fifo: deque[Experience] = deque()  # used without replay
        self._ready: list[_Entry] = []  # heap, used with replay
        self._cooling: list[tuple[float, int, _Entry]] = []  # heap by time the entry is back
        self._arrival = itertools.count()
        self._writers_registered = 0
        self._writers_active = 0
        self.dropped = 0
        # Set when the consumer is gone: a full queue then stops holding writers back.
        self._consumer_closed = False
        self._evicted_unread: list[str] = []
        if mirror is not None:
            restored = mirror.restore()
            if restored:
                self._add(restored)

    # ---- bookkeeping -----------------------------------------------------------------
    def __len__(self) -> int:
        with self._condition:
            return self._held()

    def _held(self) -> int:
        return len(self._fifo) + len(self._ready) + len(self._cooling)

    def _available(self) -> int:
        return len(self._fifo) + len(self._ready)

    def _writers_done(self) -> bool:
        return self._writers_registered > 0 and self._writers_active == 0

    def register_writer(self) -> None:
        with self._condition:
            self._writers_registered += 1
            self._writers_active += 1

    def writer_finished(self) -> None:
        with self._condition:
            self._writers_active -= 1
            if self._writers_done():
                self._cooling.clear()  # no reuse after the end
            self._condition.notify_all()

    # ---- producers -------------------------------------------------------------------
    def put(self, experiences: list[Experience]) -> None:
        if not experiences:
            return
        if self.mirror is not None:
            self.mirror.record_written(experiences)  # durable before anyone can read it
        if self.replay is None:
            chunk = self.capacity or len(experiences)
            for start in range(0, len(experiences), chunk):
                self._put_fifo(experiences[start : start + chunk])
        else:
            with self._condition:
                self._add(experiences)
                self._condition.notify_all()
                evicted_unread, self._evicted_unread = self._evicted_unread, []
            if self.mirror is not None and evicted_unread:
                self.mirror.record_consumed(evicted_unread)  # dropped: never restore them

    def _put_fifo(self, chunk: list[Experience]) -> None:
        with self._condition:
            while (
                self.capacity is not None
                and len(self._fifo) + len(chunk) > self.capacity
                and not self._consumer_closed
            ):
                self._condition.wait()
            self._fifo.extend(chunk)
            self._condition.notify_all()

    def _add(self, experiences: list[Experience]) -> None:
        if self.replay is None:
            self._fifo.extend(experiences)
            return
        for experience in experiences:
            self._push_ready(_Entry((0.0, 0), experience, 0))
        self._evict_over_capacity()

    def _push_ready(self, entry: _Entry) -> bool:
        priority = self.replay.score(entry.experience, entry.use_count)
        if priority is None:
            return False
        entry.sort_key = (-priority, next(self._arrival))
        heapq.heappush(self._ready, entry)
        return True

    def _evict_over_capacity(self) -> None:
        if self.capacity is None:
            return
        excess = self._held() - self.capacity
        if excess <= 0:
            return
        everything = self._ready + [entry for _, _, entry in self._cooling]
        evicted = heapq.nlargest(excess, everything)
        self._evicted_unread.extend(e.experience.eid for e in evicted if e.use_count == 0)
        doomed = {id(entry) for entry in evicted}
        self._ready = [entry for entry in self._ready if id(entry) not in doomed]
        heapq.heapify(self._ready)
        self._cooling = [item for item in self._cooling if id(item[2]) not in doomed]
        heapq.heapify(self._cooling)
        self.dropped += excess

    # ---- consumers -------------------------------------------------------------------
    def close_consumer(self) -> None:
        """No one will read again; writers blocked on a full queue are let through."""
        with self._condition:
            self._consumer_closed = True
            self._condition.notify_all()

    def get(self, batch_size: int, timeout: float) -> list[Experience]:
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                self._release_cooled()
                if self._available() >= batch_size or self._writers_done():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if self._cooling:
                    remaining = min(remaining, max(self._cooling[0][0] - time.monotonic(), 0.001))
                self._condition.wait(remaining)
            batch, first_reads = self._take(batch_size)
            if not batch and self._writers_done():
                raise BufferExhausted(f"queue '{self.name}': all writers finished and it is empty")
            self._condition.notify_all()  # room for blocked writers
        if self.mirror is not None and first_reads:
            self.mirror.record_consumed(first_reads)
        return batch

    def _take(self, batch_size: int) -> tuple[list[Experience], list[str]]:
        if self.replay is None:
            count = min(batch_size, len(self._fifo))
            batch = [self._fifo.popleft() for _ in range(count)]
            return batch, [e.eid for e in batch]
        batch, first_reads = [], []
        now = time.monotonic()
        cooldown = self.replay.reuse_cooldown_time
        while self._ready and len(batch) < batch_size:
            entry = heapq.heappop(self._ready)
            batch.append(entry.experience)
            if entry.use_count == 0:
                first_reads.append(entry.experience.eid)
            entry.use_count += 1
            entry.experience.info["use_count"] = entry.use_count
            if cooldown is not None and not self._writers_done():
                heapq.heappush(self._cooling, (now + cooldown, next(self._arrival), entry))
        return batch, first_reads

    # ---- checkpoints ----------------------------------------------------------------
    def unread(self, max_explore_step: int | None = None) -> list[tuple[Experience, int]]:
        """What a reader could still get, with use counts, oldest first: the buffer part of a checkpoint.

        Experiences sampled after explorer step ``max_explore_step`` are left out: a resumed
        explorer samples those steps again.
        """
        with self._condition:
            if self.replay is None:
                held = [(experience, 0) for experience in self._fifo]
            else:
                entries = self._ready + [entry for _, _, entry in self._cooling]
                held = [(e.experience, e.use_count) for e in sorted(entries, key=lambda e: e.sort_key[1])]
        if max_explore_step is None:
            return held
        return [(e, uses) for e, uses in held if e.explore_step <= max_explore_step]

    def replace_unread(self, held: list[tuple[Experience, int]]) -> int:
        """Make ``held`` the queue's whole content (a resumed run); returns how many of the
        experiences it held before are not in ``held``."""
        kept = {experience.eid for experience, _ in held}
        with self._condition:
            before = [e.eid for e in self._fifo] + [e.experience.eid for e in self._ready]
            before += [entry.experience.eid for _, _, entry in self._cooling]
            dropped = sum(eid not in kept for eid in before)
            self._fifo.clear()
            self._ready.clear()
            self._cooling.clear()
            for experience, uses in held:
                if self.replay is None:
                    self._fifo.append(experience)
                else:
                    self._push_ready(_Entry((0.0, 0), experience, uses))
            self._condition.notify_all()
        return dropped

    def _release_cooled(self) -> None:
        now = time.monotonic()
        while self._cooling and self._cooling[0][0] <= now:
            _, _, entry = heapq.heappop(self._cooling)
            self._push_ready(entry)


# ---- queues by name: per process, or shared by the processes of a run --------------------
_queues: dict[str, ExperienceQueue] = {}
_queues_lock = threading.Lock()
# When the run's components are separate processes, a function that returns the shared queue
# named so (see trivium.runtime.ray_placement); None keeps queues within this process.
_shared_queue_lookup: Any = None


def new_queue(config: StorageConfig) -> ExperienceQueue:
    """A queue built from a storage config."""
    name = config.name
    if not name:
        raise UserError("A queue storage needs a `name` (the buffer is shared by that name).")
    return ExperienceQueue(
        name=name,
        capacity=config.capacity,
        replay=ReplayPolicy.from_config(config.replay_buffer),
        mirror=open_mirror(config.path, name),
    )


def get_queue(config: StorageConfig) -> ExperienceQueue:
    """The queue named ``config.name``: this process's, created on first use, or the run's shared one."""
    name = config.name
    if not name:
        raise UserError("A queue storage needs a `name` (the buffer is shared by that name).")
    if _shared_queue_lookup is not None:
        return _shared_queue_lookup(name)
    with _queues_lock:
        queue = _queues.get(name)
        if queue is None:
            queue = _queues[name] = new_queue(config)
        return queue


def share_queues_through(lookup: Any) -> None:
    """Look queues up with ``lookup(name)`` from now on (a process of a multi-process run)."""
    global _shared_queue_lookup
    _shared_queue_lookup = lookup


def forget_queues() -> None:
    """Drop every queue of this process (a new run, or tests)."""
    with _queues_lock:
        _queues.clear()


class QueueWriter(BufferWriter):
    def __init__(self, queue: ExperienceQueue):
        self.queue = queue
        self._finished = False
        queue.register_writer()

    def write(self, experiences: list[Experience]) -> None:
        if self._finished:
            raise RuntimeError(f"write() after finish() on queue '{self.queue.name}'")
        self.queue.put(list(experiences))

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.queue.writer_finished()


class QueueReader(WaitingReader):
    def __init__(self, queue: ExperienceQueue, max_read_timeout: float):
        super().__init__(max_read_timeout)
        self.queue = queue

    def wait_for(self, batch_size: int, timeout: float) -> list[Experience]:
        return self.queue.get(batch_size, timeout)

    def close(self) -> None:
        self.queue.close_consumer()

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        held = self.queue.unread(max_explore_step)
        return {"unread": [{"experience": e.to_dict(), "use_count": uses} for e, uses in held]}

    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        held = [(Experience.from_dict(item["experience"]), int(item["use_count"])) for item in state.get("unread", [])]
        return Restored(kept=len(held), dropped=self.queue.replace_unread(held))


def open_queue_writer(config: StorageConfig) -> QueueWriter:
    return QueueWriter(get_queue(config))


def open_queue_reader(config: StorageConfig) -> QueueReader:
    return QueueReader(get_queue(config), max_read_timeout=float(config.max_read_timeout))
