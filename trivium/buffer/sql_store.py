"""Experience rows in a SQL database: append, claim, mark consumed, track producers.

Owns the queries on the ``experiences`` and ``buffer_writers`` tables for one buffer name.
Used by the ``sql`` storage and by the queue's SQLite mirror. A claim takes the oldest
unconsumed rows inside one transaction (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the
``BEGIN IMMEDIATE`` write lock on SQLite), so concurrent readers never get the same row.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import contextmanager

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError, OperationalError

from trivium.buffer.codec import experience_to_row, row_to_experience
from trivium.buffer.sql_engine import WriteLock, database_error, get_engine, with_retries, writing
from trivium.buffer.sql_schema import BufferWriterModel, ExperienceModel
from trivium.core.experience import Experience

# Keeps ``IN (...)`` lists below every backend's bound-parameter limit.
_CHUNK = 500

_experiences = ExperienceModel.__table__
_writers = BufferWriterModel.__table__


def _chunks(values: list, size: int = _CHUNK) -> Iterable[list]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class SqlExperienceStore:
    def __init__(self, path: str, buffer_name: str):
        self.path = path
        self.buffer_name = buffer_name
        self.engine: Engine = get_engine(path)
        self.writer_engine: Engine = writing(self.engine)
        self.write_lock = WriteLock(str(self.engine.url))

    @contextmanager
    def _writing(self):
        """One writing transaction, serialised across processes for SQLite files."""
        with self.write_lock.held(), self.writer_engine.begin() as connection:
            yield connection

    def _run(self, action):
        try:
            return with_retries(action)
        except (DatabaseError, OperationalError) as error:
            if "not a database" in str(error) or "malformed" in str(error):
                raise database_error(str(self.engine.url), error) from error
            raise

    # ---- producers -------------------------------------------------------------------
    def append(self, experiences: list[Experience], priorities: list[float] | None = None) -> None:
        """Insert all rows in one transaction: either all are durable or none."""
        if not experiences:
            return
        now = time.time()
        rows = []
        for i, experience in enumerate(experiences):
            row = experience_to_row(experience)
            row.update(
                buffer=self.buffer_name,
                created_at=now,
                consumed=False,
                use_count=0,
                priority=float(priorities[i]) if priorities else float(experience.model_version),
            )
            rows.append(row)

        def insert_rows() -> None:
            with self._writing() as connection:
                connection.execute(insert(_experiences), rows)

        self._run(insert_rows)

    def register_writer(self) -> int:
        def add() -> int:
            with self._writing() as connection:
                result = connection.execute(
                    insert(_writers).values(buffer=self.buffer_name, started_at=time.time())
                )
                return int(result.inserted_primary_key[0])

        return self._run(add)

    def finish_writer(self, writer_id: int) -> None:
        def finish() -> None:
            with self._writing() as connection:
                connection.execute(
                    update(_writers).where(_writers.c.id == writer_id).values(finished_at=time.time())
                )

        self._run(finish)

    def _writers_finished(self, connection) -> bool:
        registered, running = connection.execute(
            select(func.count(), func.count(_writers.c.id).filter(_writers.c.finished_at.is_(None)))
            .where(_writers.c.buffer == self.buffer_name)
        ).one()
        return registered > 0 and running == 0

    # ---- consumers -------------------------------------------------------------------
    def claim(self, limit: int) -> tuple[list[Experience], bool]:
        """Take up to ``limit`` of the oldest unconsumed rows (marking them consumed).

        Also returns whether every producer had finished before the rows were taken: if so
        and fewer than ``limit`` came back, nothing more will ever arrive.
        """

        def take() -> tuple[list[Experience], bool]:
            with self._writing() as connection:
                finished = self._writers_finished(connection)
                rows = connection.execute(
                    select(_experiences)
                    .where(_experiences.c.buffer == self.buffer_name, _experiences.c.consumed.is_(False))
                    .order_by(_experiences.c.id)
                    .limit(limit)
                    .with_for_update(skip_locked=True)
                ).all()
                if rows:
                    ids = [row.id for row in rows]
                    for chunk in _chunks(ids):
                        connection.execute(
                            update(_experiences)
                            .where(_experiences.c.id.in_(chunk))
                            .values(consumed=True, use_count=_experiences.c.use_count + 1)
                        )
            return [row_to_experience(row) for row in rows], finished

        return self._run(take)

    def mark_consumed(self, eids: list[str], use_counts: dict[str, int] | None = None) -> None:
        if not eids:
            return

        def mark() -> None:
            with self._writing() as connection:
                for chunk in _chunks(eids):
                    connection.execute(
                        update(_experiences)
                        .where(_experiences.c.buffer == self.buffer_name, _experiences.c.eid.in_(chunk))
                        .values(consumed=True, use_count=_experiences.c.use_count + 1)
                    )

        self._run(mark)

    def unconsumed(self) -> list[Experience]:
        """Every row no reader has taken yet, oldest first (used to restore a queue)."""

        def load() -> list[Experience]:
            with self.engine.connect() as connection:
                rows = connection.execute(
                    select(_experiences)
                    .where(_experiences.c.buffer == self.buffer_name, _experiences.c.consumed.is_(False))
                    .order_by(_experiences.c.id)
                ).all()
                connection.commit()
            return [row_to_experience(row) for row in rows]

        return self._run(load)

    def keep_unread_only(self, eids: list[str]) -> int:
        """Make exactly ``eids`` the unread rows (a resumed run: what its checkpoint had not
        trained on). Returns how many unread rows were dropped."""

        def reset() -> int:
            with self._writing() as connection:
                unread = set(
                    connection.execute(
                        select(_experiences.c.eid).where(
                            _experiences.c.buffer == self.buffer_name, _experiences.c.consumed.is_(False)
                        )
                    ).scalars()
                )
                connection.execute(
                    update(_experiences)
                    .where(_experiences.c.buffer == self.buffer_name, _experiences.c.consumed.is_(False))
                    .values(consumed=True)
                )
                for chunk in _chunks(eids):
                    connection.execute(
                        update(_experiences)
                        .where(_experiences.c.buffer == self.buffer_name, _experiences.c.eid.in_(chunk))
                        .values(consumed=False)
                    )
            return len(unread - set(eids))

        return self._run(reset)

    def count(self, consumed: bool | None = None) -> int:
        def query() -> int:
            statement = select(func.count()).select_from(_experiences).where(
                _experiences.c.buffer == self.buffer_name
            )
            if consumed is not None:
                statement = statement.where(_experiences.c.consumed.is_(consumed))
            with self.engine.connect() as connection:
                value = connection.execute(statement).scalar_one()
                connection.commit()
            return int(value)

        return self._run(query)
