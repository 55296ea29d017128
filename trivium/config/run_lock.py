"""One run per run directory: an exclusive lock file, ``<run dir>/run.lock``.

Owns ``run_lock``, a context manager that takes the lock (``fcntl.flock``, released by the
kernel when its holder exits or dies) and writes the holder's pid, host and start time into
the file. A second run pointed at the same directory gets a ``RunDirectoryInUse`` error
naming the holder. A lock file left behind by a process that died (the kernel released its
lock, but the file still names it) is taken over with a warning.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from trivium.errors import UserError

LOCK_FILE = "run.lock"
logger = logging.getLogger(__name__)


class RunDirectoryInUse(UserError):
    """Another live process holds the run directory's lock."""


def _holder(text: str) -> dict[str, Any]:
    try:
        holder = json.loads(text)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process"
    started = holder.get("started")
    since = f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}" if started else ""
    return f"process {holder.get('pid', '?')} on host {holder.get('host', '?')}{since}"


@contextmanager
def run_lock(run_dir: str | Path) -> Iterator[Path]:
    """Hold ``<run_dir>/run.lock`` for the duration of the block; yields the lock file's path."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+", encoding="utf-8")
    except OSError as error:
        raise UserError(
            f"Cannot create the lock file {path}: {error.strerror or error}. The run directory must be "
            "writable; check its permissions or set checkpoint_root_dir to a writable place."
        ) from error
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise RunDirectoryInUse(
                f"The run directory {run_dir} is in use by {_describe(_holder(handle.read()))}. "
                "Wait for that run to end or stop it, or give this run another `name`."
            ) from None
        handle.seek(0)
        previous = _holder(handle.read())
        if previous:
            # The kernel released the lock, so its holder is gone; the file still names it.
            logger.warning("run directory %s: taking over the lock left by %s, which is no longer running",
                           run_dir, _describe(previous))
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}))
        handle.flush()
        try:
            yield path
        finally:
            handle.seek(0)
            handle.truncate()  # an empty file: released cleanly
            handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    finally:
        handle.close()
