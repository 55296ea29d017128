"""The run's shared experience queues on Ray, held by the worker actor that writes them.

An in-memory queue shared by the explorer and the trainer lives in one worker's process, the
"queue host": the explorer when the run explores (its writes are plain calls in its own
process), the trainer otherwise. The other processes reach it through ``QueueClient``, whose
calls run on the host in a concurrency group of their own (``QUEUE_CALLS``), so a trainer
blocked on a read never holds up the explorer's own methods. No process is started for a
queue: on a small machine each process imports torch and costs a second of start-up.

``QueueRoute`` is what every actor of the run is told: which actor hosts the queues, and
their storage configs. ``share_queues`` makes this process look queues up accordingly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from trivium.runtime.ray_calls import call_actor

# The concurrency group of queue calls on the host; blocked readers and writers each hold a thread.
QUEUE_CALLS = "queues"
QUEUE_CONCURRENCY = 16


@dataclass(frozen=True)
class QueueRoute:
    """The actor (by name, in the run's namespace) that hosts the run's shared queues, and
    their storage configs (none: the run shares no in-memory queue)."""

    host: str
    namespace: str
    storages: tuple[Any, ...] = ()


class QueueHosting:
    """The queue host's side: the queues themselves, and the one method other processes call."""

    hosted_queues: dict[str, Any]

    def host_queues(self, storages: tuple[Any, ...]) -> None:
        from trivium.buffer.queue_storage import new_queue

        self.hosted_queues = {storage.name: new_queue(storage) for storage in storages}

    @ray.method(concurrency_group=QUEUE_CALLS)
    def call_queue(self, name: str, method: str, *args: Any) -> Any:
        """``method(*args)`` on the hosted queue ``name`` (one of ``QueueClient``'s calls)."""
        if method not in QueueClient.METHODS:
            raise ValueError(f"{method!r} is not a queue call (one of {sorted(QueueClient.METHODS)})")
        return getattr(self.hosted_queues[name], method)(*args)


def share_queues(route: QueueRoute, actor_name: str, host: QueueHosting | None) -> None:
    """Look the run's shared queues up in this process from now on: the queues themselves in
    the host (``actor_name == route.host``; ``host`` is this process's actor), a client elsewhere."""
    from trivium.buffer.queue_storage import share_queues_through

    if actor_name == route.host:
        if host is None:
            raise TypeError(f"the {actor_name} actor is the run's queue host but cannot hold queues")
        host.host_queues(route.storages)
        share_queues_through(lambda name: host.hosted_queues[name])
    else:
        share_queues_through(lambda name: QueueClient(route, name))


class QueueClient:
    """A shared queue as a reader or writer in another process sees it: each call runs on the host."""

    METHODS = frozenset({
        "register_writer", "writer_finished", "put", "get", "close_consumer", "unread", "replace_unread", "__len__",
    })

    def __init__(self, route: QueueRoute, name: str):
        self.route = route
        self.name = name
        self._handle = None  # looked up on the first call: the host may be created after this process

    def _call(self, method: str, *args: Any) -> Any:
        if self._handle is None:
            self._handle = ray.get_actor(self.route.host, namespace=self.route.namespace)
        return call_actor(self._handle, self.route.host, "call_queue", self.name, method, *args)

    def register_writer(self) -> None:
        self._call("register_writer")

    def writer_finished(self) -> None:
        self._call("writer_finished")

    def put(self, experiences) -> None:
        self._call("put", experiences)

    def get(self, batch_size: int, timeout: float):
        return self._call("get", batch_size, timeout)

    def close_consumer(self) -> None:
        self._call("close_consumer")

    def unread(self, max_explore_step: int | None = None):
        return self._call("unread", max_explore_step)

    def replace_unread(self, held) -> int:
        return self._call("replace_unread", held)

    def __len__(self) -> int:
        return self._call("__len__")
