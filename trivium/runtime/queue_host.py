"""The actor that holds an experience queue shared by the explorer and trainer processes.

A module of its own, importing only the queue: Ray imports the module of an actor's class in
the actor's process, so the queue's process imports the queue and the experiences it holds,
not the workers, the engines or the weight transport.
"""

from __future__ import annotations

import logging
import os
from typing import Any


def queue_actor_name(buffer_name: str) -> str:
    return f"queue:{buffer_name}"


class QueueHost:
    """An ``ExperienceQueue`` in its own process; a threaded actor, so blocking reads and writes overlap."""

    def __init__(self, storage_config: Any):
        from trivium.buffer.queue_storage import new_queue

        logging.basicConfig(level=logging.INFO)
        self.queue = new_queue(storage_config)

    def register_writer(self) -> None:
        self.queue.register_writer()

    def writer_finished(self) -> None:
        self.queue.writer_finished()

    def put(self, experiences) -> None:
        self.queue.put(experiences)

    def get(self, batch_size: int, timeout: float):
        return self.queue.get(batch_size, timeout)

    def close_consumer(self) -> None:
        self.queue.close_consumer()

    def unread(self, max_explore_step):
        return self.queue.unread(max_explore_step)

    def replace_unread(self, held) -> int:
        return self.queue.replace_unread(held)

    def pid(self) -> int:
        return os.getpid()

    def size(self) -> int:
        return len(self.queue)
