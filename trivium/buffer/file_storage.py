"""The ``file`` storage for experiences: JSON lines, for explore-only runs and debugging.

Owns writing experiences to a ``.jsonl`` file (one experience per line, appended and
flushed per ``write``) and reading such a file back. Tasksets and SFT/DPO datasets stored
as files are read by ``task_reader`` and ``auxiliary`` instead.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trivium.buffer.base import BufferExhausted, BufferReader, BufferWriter, Restored, check_batch_size
from trivium.buffer.codec import experience_from_json, experience_to_json
from trivium.core.experience import Experience
from trivium.errors import UserError

if TYPE_CHECKING:
    from trivium.config.schema import StorageConfig


def experience_file(config: StorageConfig) -> Path:
    """``path`` itself when it names a ``.jsonl`` file, else ``<path>/<name>.jsonl``."""
    path, name = config.path, config.name
    if not path:
        raise UserError(f"File storage '{name}' needs a `path` (a directory or a .jsonl file).")
    path = Path(path).expanduser()
    return path if path.suffix == ".jsonl" else path / f"{name}.jsonl"


class JsonlWriter(BufferWriter):
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")
        except OSError as error:
            raise UserError(
                f"Cannot write the experience file {self.path}: {error.strerror or error}. "
                "Point the storage `path` to a writable place."
            ) from error
        self._lock = threading.Lock()

    def write(self, experiences: list[Experience]) -> None:
        text = "".join(experience_to_json(e) + "\n" for e in experiences)
        with self._lock:
            if self._file.closed:
                raise RuntimeError(f"write() after finish() on {self.path}")
            self._file.write(text)
            self._file.flush()

    def finish(self) -> None:
        with self._lock:
            self._file.close()


class JsonlReader(BufferReader):
    """Reads a finished experience file front to back; never waits for more lines."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise UserError(f"Experience file {self.path} does not exist; check the storage `path`.")
        self._file = open(self.path, "rb")  # decoded per line, so a bad byte is reported with its line
        self._line_number = 0

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        check_batch_size(batch_size)
        batch = []
        while len(batch) < batch_size:
            line = self._file.readline()
            if not line:
                break
            self._line_number += 1
            if not line.strip():
                continue
            try:
                batch.append(experience_from_json(line.decode("utf-8")))
            except UnicodeDecodeError as error:
                raise UserError(
                    f"{self.path} line {self._line_number} is not UTF-8 text "
                    f"(byte 0x{line[error.start]:02x} at column {error.start + 1})"
                ) from error
            except (json.JSONDecodeError, TypeError, ValueError) as error:
                raise UserError(
                    f"{self.path} line {self._line_number} is not an experience record: {error}"
                ) from error
        if not batch:
            raise BufferExhausted(f"{self.path}: end of file")
        return batch

    def close(self) -> None:
        self._file.close()

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        return {"line": self._line_number}

    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        """Skip the lines a checkpointed run had already read."""
        while self._line_number < int(state.get("line", 0)) and self._file.readline():
            self._line_number += 1
        return Restored()


def open_file_writer(config: StorageConfig) -> JsonlWriter:
    return JsonlWriter(experience_file(config))


def open_file_reader(config: StorageConfig) -> JsonlReader:
    return JsonlReader(experience_file(config))
