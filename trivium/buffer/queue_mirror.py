"""Durable copies of an in-memory queue: every write is persisted before it becomes visible.

Owns the two mirror formats behind a queue's optional ``path``:
  * a SQL database (a ``.db``/``.sqlite`` path or a SQLAlchemy URL): rows in the
    ``experiences`` table, ``consumed`` set when a reader first takes them;
  * a ``.jsonl`` file: ``{"written": {...}}`` lines for writes, ``{"consumed": [eids]}``
    lines for first reads.
Restart rule: ``restore()`` returns the mirrored experiences no reader had taken yet, in
write order; the queue puts them back. Experiences already read once are not restored,
even when replay would have reused them.

A mirror file is opened for writing when the mirror is created, so a read-only or missing
place is a ``UserError`` at start, not a crash at the first write.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Protocol

from trivium.buffer.codec import experience_from_json
from trivium.core.experience import Experience
from trivium.errors import UserError

logger = logging.getLogger(__name__)


class QueueMirror(Protocol):
    def record_written(self, experiences: list[Experience]) -> None: ...

    def record_consumed(self, eids: list[str]) -> None: ...

    def restore(self) -> list[Experience]: ...


class SqlMirror:
    def __init__(self, path: str, buffer_name: str):
        # Imported here: SQLAlchemy costs every run about half a second of start-up otherwise.
        from trivium.buffer.sql_store import SqlExperienceStore

        self.store = SqlExperienceStore(path, buffer_name)

    def record_written(self, experiences: list[Experience]) -> None:
        self.store.append(experiences)

    def record_consumed(self, eids: list[str]) -> None:
        self.store.mark_consumed(eids)

    def restore(self) -> list[Experience]:
        return self.store.unconsumed()


def check_writable(path: Path, buffer_name: str) -> None:
    """Create ``path`` (and its folder) if needed and open it for appending; a UserError when that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as error:
        raise UserError(
            f"Queue '{buffer_name}': cannot write its mirror {path}: {error.strerror or error}. "
            "Point the queue `path` to a writable place (the run directory, say)."
        ) from error


class JsonlMirror:
    def __init__(self, path: str | Path, buffer_name: str = "queue"):
        self.path = Path(path).expanduser()
        check_writable(self.path, buffer_name)
        self._lock = threading.Lock()
        self._file = None

    def _append(self, lines: list[str]) -> None:
        with self._lock:
            if self._file is None:
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write("".join(line + "\n" for line in lines))
            # In the OS page cache after flush: survives the death of this process.
            self._file.flush()

    def record_written(self, experiences: list[Experience]) -> None:
        self._append([json.dumps({"written": e.to_dict()}, ensure_ascii=False) for e in experiences])

    def record_consumed(self, eids: list[str]) -> None:
        if eids:
            self._append([json.dumps({"consumed": list(eids)})])

    def restore(self) -> list[Experience]:
        if not self.path.exists():
            return []
        written: dict[str, dict] = {}
        consumed: set[str] = set()
        with open(self.path, encoding="utf-8") as file:
            lines = file.readlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                if number == len(lines) and not line.endswith("\n"):
                    # A write cut short by a crash; its write() never returned.
                    logger.warning("%s: ignoring a truncated last line", self.path)
                    continue
                raise UserError(
                    f"Queue mirror {self.path} line {number} is not valid JSON ({error}). "
                    "Fix or remove that line, or point the queue `path` to a new file."
                ) from error
            if "written" in record:
                written[record["written"]["eid"]] = record["written"]
            else:
                consumed.update(record.get("consumed", []))
        return [experience_from_json(data) for eid, data in written.items() if eid not in consumed]

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def open_mirror(path: str | None, buffer_name: str) -> QueueMirror | None:
    """The mirror for a queue ``path``: ``.jsonl`` -> JSON lines, anything else -> SQL."""
    if not path:
        return None
    path = str(path)
    if path.endswith(".jsonl") and "://" not in path:
        return JsonlMirror(path, buffer_name)
    if "://" not in path and not path.endswith((".db", ".sqlite", ".sqlite3")):
        raise UserError(
            f"Queue '{buffer_name}': cannot tell how to mirror to {path!r}. Use a .jsonl file, "
            "a .db/.sqlite file, or a SQLAlchemy URL such as sqlite:///buffer.db."
        )
    sqlite_file = path.removeprefix("sqlite:///") if path.startswith("sqlite:///") else path
    if "://" not in sqlite_file and sqlite_file not in ("", ":memory:"):
        file = Path(sqlite_file).expanduser()
        check_writable(file, buffer_name)
        check_writable(file.with_name(file.name + ".lock"), buffer_name)
    return SqlMirror(path, buffer_name)

