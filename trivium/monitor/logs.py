"""Per-component log files in the run directory, and reading them back for ``trivium log``.

Files: ``<run_dir>/log/<component>.log`` (or ``<run_dir>/log/<node_ip>/<component>.log``
with ``log.group_by_node``). Components are names such as ``explorer``, ``trainer``,
``explorer_runner_0``. Each record starts with a header line
``<date> <time.microseconds> | <LEVEL> | <component> | <message>``; a multi-line message (a traceback)
continues on the following lines, which belong to the same record.
"""

from __future__ import annotations

import logging
import re
import socket
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from trivium.errors import UserError

LOG_DIR_NAME = "log"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Microseconds, so records of several files written within one millisecond still merge in order.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
HEADER = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{6}) \| (?P<level>[A-Z]+)\s* \| "
    r"(?P<component>[^|]+?) \| "
)


def log_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOG_DIR_NAME


def parse_level(level: str | int, *, key: str = "log.level") -> int:
    """``"info"`` / ``"INFO"`` / ``logging.INFO`` -> ``logging.INFO``; anything else names the key."""
    if isinstance(level, int):
        return level
    name = str(level).strip().upper()
    if name == "WARN":
        name = "WARNING"
    if name not in LEVELS:
        raise UserError(f"{key}: unknown log level {level!r}; choose one of {', '.join(LEVELS[:4])}")
    return getattr(logging, name)


def current_node_ip() -> str:
    """The IP other nodes see: Ray's view when Ray runs here, else the outgoing interface."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.util.get_node_ip_address()
    try:
        # A UDP "connect" sends nothing; it only picks the interface a packet would leave by.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.254.254.254", 1))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def component_log_path(run_dir: str | Path, component_name: str, group_by_node: bool = False) -> Path:
    directory = log_dir(run_dir)
    if group_by_node:
        directory = directory / current_node_ip()
    return directory / f"{component_name}.log"


def setup_component_logger(
    run_dir: str | Path, component_name: str, level: str | int = "INFO", group_by_node: bool = False
) -> logging.Logger:
    """The logger ``trivium.<component_name>``, writing to the component's file in the run dir.

    Calling it again for the same component replaces the file handler (no duplicate lines).
    Records still propagate, so warnings also reach the console through Python's defaults.
    """
    if not component_name or "/" in component_name or component_name != component_name.strip():
        raise ValueError(f"component name {component_name!r} must be a plain file name such as 'explorer'")
    path = component_log_path(run_dir, component_name, group_by_node)
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"trivium.{component_name}")
    logger.setLevel(parse_level(level))
    for handler in list(logger.handlers):
        if getattr(handler, "trivium_component_file", False):
            logger.removeHandler(handler)
            handler.close()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.trivium_component_file = True  # type: ignore[attr-defined]
    handler.setFormatter(_ComponentFormatter(f"%(asctime)s | %(levelname)s | {component_name} | %(message)s"))
    logger.addHandler(handler)
    return logger


class _ComponentFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created).strftime(TIME_FORMAT)


# ---- reading ------------------------------------------------------------------------------


@dataclass
class LogRecord:
    """One record of a component log; ``level`` is None for lines seen without their header."""

    time: datetime | None
    level: str | None
    component: str
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def matches(self, *, min_level: int = logging.NOTSET, keyword: str | None = None) -> bool:
        if self.level is not None and getattr(logging, self.level, logging.NOTSET) < min_level:
            return False
        return keyword is None or keyword.lower() in self.text.lower()


def find_log_files(run_dir: str | Path, component: str | None = None) -> list[Path]:
    """Component logs of a run (also those grouped by node), optionally only one component."""
    directory = log_dir(run_dir)
    if not directory.is_dir():
        return []
    files = sorted(directory.glob("*.log")) + sorted(directory.glob("*/*.log"))
    if component is not None:
        files = [path for path in files if path.stem == component]
    return files


def parse_log_lines(lines: list[str], component: str) -> list[LogRecord]:
    """Group lines into records; lines before the first header form a header-less record."""
    records: list[LogRecord] = []
    for line in lines:
        match = HEADER.match(line)
        if match:
            records.append(
                LogRecord(
                    time=datetime.strptime(match["time"], TIME_FORMAT),
                    level=match["level"],
                    component=match["component"],
                    lines=[line],
                )
            )
        elif records:
            records[-1].lines.append(line)
        else:
            records.append(LogRecord(time=None, level=None, component=component, lines=[line]))
    return records


def read_log_records(files: list[Path]) -> list[LogRecord]:
    """All records of the given files, merged in time order (stable for equal times)."""
    records: list[LogRecord] = []
    for path in files:
        records.extend(
            parse_log_lines(path.read_text(encoding="utf-8", errors="replace").splitlines(), path.stem)
        )
    return sorted(records, key=lambda record: record.time or datetime.min)


def filter_records(
    records: list[LogRecord],
    *,
    min_level: int = logging.NOTSET,
    keyword: str | None = None,
    last: int | None = None,
) -> list[LogRecord]:
    kept = [record for record in records if record.matches(min_level=min_level, keyword=keyword)]
    if last is not None:
        kept = kept[-last:] if last > 0 else []
    return kept


class LogFollower:
    """Reads what was appended to a run's logs since the last poll (``tail -f`` over many files).

    A file that appears later is picked up from its start. Only whole lines are returned; a
    header-less chunk (the rest of a traceback written after a poll) keeps the verdict of the
    record it continues, so filtering stays per record.
    """

    def __init__(self, run_dir: str | Path, component: str | None = None, *, from_end: bool = True):
        self.run_dir = Path(run_dir)
        self.component = component
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, str] = {}
        self._last_verdict: dict[Path, bool] = {}
        if from_end:
            for path in find_log_files(self.run_dir, component):
                self._offsets[path] = path.stat().st_size

    def poll(self, *, min_level: int = logging.NOTSET, keyword: str | None = None) -> list[LogRecord]:
        shown: list[LogRecord] = []
        for path in find_log_files(self.run_dir, self.component):
            for record in parse_log_lines(self._new_lines(path), path.stem):
                verdict = (
                    self._last_verdict.get(path, False)
                    if record.level is None
                    else record.matches(min_level=min_level, keyword=keyword)
                )
                self._last_verdict[path] = verdict
                if verdict:
                    shown.append(record)
        return shown

    def _new_lines(self, path: Path) -> list[str]:
        offset = self._offsets.get(path, 0)
        size = path.stat().st_size
        if size < offset:  # the file was truncated or replaced: start over
            offset, self._partial[path] = 0, ""
        if size == offset:
            return []
        with open(path, "rb") as handle:
            handle.seek(offset)
            chunk = handle.read(size - offset)
        self._offsets[path] = size
        text = self._partial.pop(path, "") + chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial[path] = lines.pop()  # an unfinished last line waits for its newline
        return lines
