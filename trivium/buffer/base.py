"""The reader/writer interface every experience storage implements, and its end signal.

Owns: ``BufferWriter``, ``BufferReader`` (and ``WaitingReader``, the reader that waits for its
batch while writers fill the storage), ``BufferExhausted`` and the batch-size check.
Storages live in their own modules; nothing here touches a database, a file or a thread.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from trivium.core.experience import Experience

# Default wait for a full batch when the config gives no ``max_read_timeout`` (30 minutes).
DEFAULT_READ_TIMEOUT = 1800.0


class BufferExhausted(Exception):
    """Every writer has finished and nothing is left to read (or a taskset ran out)."""


class BufferWriter(ABC):
    """Producer side. Safe to use from several threads; one writer per producer."""

    @abstractmethod
    def write(self, experiences: list[Experience]) -> None:
        """Store ``experiences``; for durable storages returns only once they are committed."""

    @abstractmethod
    def finish(self) -> None:
        """This producer is done. Readers drain what is left, then get ``BufferExhausted``."""

    async def write_async(self, experiences: list[Experience]) -> None:
        await asyncio.to_thread(self.write, experiences)

    def __enter__(self) -> BufferWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finish()


@dataclass(frozen=True)
class Restored:
    """What ``BufferReader.load_state_dict`` did: unread experiences put back, and dropped."""

    kept: int = 0
    dropped: int = 0


class BufferReader(ABC):
    """Consumer side."""

    @abstractmethod
    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        """Up to ``batch_size`` experiences.

        Blocks until ``batch_size`` are available; after ``timeout`` seconds (default: the
        storage's ``max_read_timeout``) returns what is there, possibly fewer. Raises
        ``BufferExhausted`` when all writers have finished and nothing is left.
        """

    async def read_async(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        return await asyncio.to_thread(self.read, batch_size, timeout)

    def close(self) -> None:
        """Release connections; the default has nothing to release."""

    @abstractmethod
    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        """What a checkpoint keeps of this reader: its position, or the experiences it has not
        read yet (only those sampled up to explorer step ``max_explore_step``). JSON-able."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        """Continue from ``state``: the unread experiences it lists are put back, any other
        unread ones are dropped (sampled after the checkpoint, so explored again)."""


class WaitingReader(BufferReader):
    """A reader of a storage that writers fill as it reads (a queue, a SQL table): a read waits
    for its whole batch up to ``timeout`` seconds, by default ``max_read_timeout``."""

    def __init__(self, max_read_timeout: float = DEFAULT_READ_TIMEOUT):
        self.max_read_timeout = max_read_timeout

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        check_batch_size(batch_size)
        return self.wait_for(batch_size, self.max_read_timeout if timeout is None else timeout)

    @abstractmethod
    def wait_for(self, batch_size: int, timeout: float) -> list[Experience]:
        """Up to ``batch_size`` experiences, as soon as there are that many or after ``timeout``
        seconds; ``BufferExhausted`` when every writer has finished and nothing is left."""


def check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
