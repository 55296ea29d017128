"""The ``sql`` storage: experiences in a database shared by any number of processes.

Owns the reader/writer pair over ``SqlExperienceStore``. A writer registers itself as a
producer when created and marks itself finished in ``finish()``; a reader polls for rows,
claims them (each row goes to exactly one reader) and stops with ``BufferExhausted`` once
every registered producer finished and no row is left. A producer that died without
``finish()`` keeps readers waiting; they then return partial batches after the timeout.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from trivium.buffer.base import BufferExhausted, BufferWriter, Restored, WaitingReader
from trivium.buffer.sql_store import SqlExperienceStore
from trivium.core.experience import Experience

if TYPE_CHECKING:
    from trivium.config.schema import StorageConfig

# Polling starts fast (low latency when data flows) and backs off to spare the database.
_FIRST_POLL = 0.01
_MAX_POLL = 0.5


def sql_path(config: StorageConfig) -> str:
    path = config.path
    if not path:
        from trivium.errors import UserError

        raise UserError(
            f"Storage '{config.name}' has storage_type 'sql' but no `path`; "
            "set it to a SQLite file (e.g. buffer.db) or a SQLAlchemy URL."
        )
    return str(path)


class SQLWriter(BufferWriter):
    def __init__(self, store: SqlExperienceStore):
        self.store = store
        self.writer_id = store.register_writer()
        self._finished = False

    @classmethod
    def from_config(cls, config: StorageConfig) -> SQLWriter:
        return cls(SqlExperienceStore(sql_path(config), config.name))

    def write(self, experiences: list[Experience]) -> None:
        if self._finished:
            raise RuntimeError("write() after finish() on a SQL buffer writer")
        self.store.append(list(experiences))

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.store.finish_writer(self.writer_id)


class SQLReader(WaitingReader):
    def __init__(self, store: SqlExperienceStore, max_read_timeout: float):
        super().__init__(max_read_timeout)
        self.store = store

    @classmethod
    def from_config(cls, config: StorageConfig) -> SQLReader:
        return cls(SqlExperienceStore(sql_path(config), config.name), float(config.max_read_timeout))

    def wait_for(self, batch_size: int, timeout: float) -> list[Experience]:
        deadline = time.monotonic() + timeout
        batch: list[Experience] = []
        poll = _FIRST_POLL
        while True:
            claimed, finished = self.store.claim(batch_size - len(batch))
            batch.extend(claimed)
            if len(batch) >= batch_size:
                return batch
            if finished:
                if batch:
                    return batch
                raise BufferExhausted(f"buffer '{self.store.buffer_name}': all writers finished")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return batch
            time.sleep(min(poll, remaining))
            poll = min(poll * 2, _MAX_POLL)

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        """The rows no reader has taken yet (up to explorer step ``max_explore_step``), by eid."""
        unread = self.store.unconsumed()
        if max_explore_step is not None:
            unread = [e for e in unread if e.explore_step <= max_explore_step]
        return {"unread_eids": [e.eid for e in unread]}

    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        eids = list(state.get("unread_eids", []))
        return Restored(kept=len(eids), dropped=self.store.keep_unread_only(eids))


def open_sql_writer(config: StorageConfig) -> SQLWriter:
    return SQLWriter.from_config(config)


def open_sql_reader(config: StorageConfig) -> SQLReader:
    return SQLReader.from_config(config)
