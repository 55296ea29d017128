"""Opening a buffer database: URL normalisation, SQLite tuning, retries, clear errors.

Owns how trivium talks to a database engine: a file path becomes a SQLite URL; SQLite gets
WAL journaling, a busy timeout and write-locking transactions (``BEGIN IMMEDIATE``) so
several processes can write; transient "database is locked" errors are retried; a file
that is not a database becomes a ``UserError``. Table layouts live in ``sql_schema``.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError
from sqlalchemy.pool import StaticPool

from trivium.buffer.sql_schema import Base
from trivium.errors import UserError

try:
    import fcntl
except ImportError:  # not on Windows: SQLite's busy timeout alone serialises writers there
    fcntl = None

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds SQLite waits on a locked database before raising; retries come on top.
SQLITE_BUSY_TIMEOUT = 30.0
RETRY_ATTEMPTS = 8
# Execution option marking a transaction that will write (see ``writing``).
WRITE_OPTION = "trivium_writes"

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def database_url(path: str) -> str:
    """A SQLAlchemy URL for ``path``: URLs pass through, file paths become ``sqlite:///``."""
    if not path:
        raise UserError("A SQL buffer needs a `path`: a SQLite file or a SQLAlchemy URL.")
    if "://" in path:
        try:
            make_url(path)
        except ArgumentError as error:
            raise UserError(f"`path` {path!r} is not a valid SQLAlchemy URL: {error}") from error
        return path
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    return Path(database)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record):
        # The driver's own transaction handling is off; we issue BEGIN ourselves below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL survives a process crash; only power loss can drop the last commits.
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection):
        # Writing transactions take the write lock up front, so one that reads first (a claim)
        # cannot fail on upgrading its lock; read-only ones stay concurrent with writers.
        if connection.get_execution_options().get(WRITE_OPTION):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            connection.exec_driver_sql("BEGIN")


def get_engine(path: str) -> Engine:
    """One engine per URL per process, with its tables created."""
    url = database_url(path)
    with _engines_lock:
        engine = _engines.get(url)
        if engine is not None:
            return engine
        engine = _create_engine(url)
        _engines[url] = engine
        return engine


def _create_engine(url: str) -> Engine:
    if is_sqlite(url):
        file = _sqlite_file(url)
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(
                url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT, "check_same_thread": False}
            )
        else:
            engine = create_engine(
                url, connect_args={"check_same_thread": False}, poolclass=StaticPool
            )
        _configure_sqlite(engine)
    else:
        try:
            engine = create_engine(url, pool_recycle=3600)
        except ModuleNotFoundError as error:
            raise UserError(
                f"The database driver for {make_url(url).drivername!r} is not installed "
                f"({error.name}). For PostgreSQL: pip install 'trivium[postgres]'."
            ) from error
    try:
        with_retries(lambda: Base.metadata.create_all(engine))
    except DatabaseError as error:
        engine.dispose()
        raise database_error(url, error) from error
    return engine


def writing(engine: Engine) -> Engine:
    """``engine`` for transactions that write (``BEGIN IMMEDIATE`` on SQLite)."""
    return engine.execution_options(**{WRITE_OPTION: True})


class WriteLock:
    """A cross-process lock file next to a SQLite database, held around each write.

    SQLite's own busy handler polls with sleeps of up to 100 ms, so contending writers
    idle long after the lock is free; a blocking ``flock`` wakes the next writer at once.
    Each thread opens its own descriptor, so threads exclude each other too. A no-op for
    other databases and where ``fcntl`` is missing.
    """

    def __init__(self, url: str):
        file = _sqlite_file(url) if is_sqlite(url) else None
        self.path = None if file is None or fcntl is None else file.with_name(file.name + ".lock")
        self._local = threading.local()

    @contextmanager
    def held(self):
        if self.path is None:
            yield
            return
        fd = getattr(self._local, "fd", None)
        if fd is None:
            fd = self._local.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def database_error(url: str, error: Exception) -> UserError:
    """A message that says which database is unusable and what to do about it."""
    text = str(getattr(error, "orig", error))
    shown = make_url(url).render_as_string(hide_password=True)
    if "not a database" in text or "malformed" in text or "encrypted" in text:
        return UserError(
            f"The buffer database {shown} is corrupt or not a SQLite file ({text}). "
            "Move the file aside (or delete it) and point the storage `path` to a fresh file."
        )
    return UserError(f"Cannot use the buffer database {shown}: {text}")


def _is_transient(error: OperationalError) -> bool:
    text = str(error.orig).lower()
    return "locked" in text or "busy" in text or "deadlock" in text or "could not serialize" in text


def with_retries(action: Callable[[], T], attempts: int = RETRY_ATTEMPTS) -> T:
    """Run ``action``; retry with jittered backoff while the database reports contention."""
    for attempt in range(attempts):
        try:
            return action()
        except OperationalError as error:
            if not _is_transient(error) or attempt == attempts - 1:
                raise
            delay = min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())
            logger.debug("database busy (%s); retrying in %.2fs", error.orig, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def dispose_engine(path: str) -> None:
    """Close the cached engine for ``path`` (tests and tools that reopen a file)."""
    url = database_url(path)
    with _engines_lock:
        engine = _engines.pop(url, None)
    if engine is not None:
        engine.dispose()
