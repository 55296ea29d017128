"""Loading the rows of a taskset or training dataset from files or a SQL ``tasks`` table.

Owns the mapping from a storage config to a random-access sequence of row dicts, through
the ``load_rows`` factory its storage kind registered (``trivium.core.storage_kinds``):
jsonl files are read line by line here (so a bad line is skipped and reported by its line
number), other files through ``datasets.load_dataset`` (a directory in Hugging Face layout,
or one json/parquet/csv file), and the ``tasks`` table (rows of this storage's name) for
SQL. A file that cannot be read at all (empty, truncated, not UTF-8) is one ``UserError``
naming the dataset and the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from trivium.buffer.row_check import BadRow, read_jsonl
from trivium.buffer.split_files import split_files
from trivium.config.schema import StorageConfig
from trivium.core.storage_kinds import kinds_with, storage_kind
from trivium.errors import UserError, utf8_problem

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def format_dict(config: StorageConfig) -> dict[str, Any]:
    """The storage's ``format`` section as a plain dict."""
    return dataclasses.asdict(config.format)


@dataclasses.dataclass
class LoadedRows:
    """A dataset's rows, where each came from (when known), and the rows left out on loading."""

    rows: Sequence[dict[str, Any]]
    places: list[str] | None = None  # e.g. "data/train.jsonl line 3", one per row
    bad: list[BadRow] = field(default_factory=list)

    def column_names(self) -> list[str]:
        """The dataset's columns; for plain rows, every key some row has."""
        names = getattr(self.rows, "column_names", None)
        if names is not None:
            return list(names)
        return list(dict.fromkeys(key for row in self.rows for key in row))

    def place(self, number: int) -> str:
        return self.places[number] if self.places is not None else f"row {number}"


def load_rows(config: StorageConfig) -> LoadedRows:
    """The rows of the dataset ``config`` names, loaded by its storage kind."""
    kind = storage_kind(config.storage_type, key=f"Dataset '{config.name}'")
    if not kind.holds_datasets:
        raise UserError(
            f"Dataset '{config.name}' has storage_type {config.storage_type!r}; tasksets and training datasets "
            f"are read from {' or '.join(repr(name) for name in kinds_with('holds_datasets'))} storage."
        )
    return kind.rows(config)


def load_file_rows(config: StorageConfig) -> LoadedRows:
    """Rows of a ``file`` storage: jsonl files line by line, anything else through ``datasets``."""
    name, path = config.name, config.path
    if not path:
        raise UserError(f"Dataset '{name}' needs a `path` (a directory or a jsonl/parquet file).")
    subset, split = config.subset_name, config.split
    local = Path(str(path)).expanduser()
    jsonl_files = _jsonl_files(local, split, subset)
    if jsonl_files:
        return _load_jsonl_rows(jsonl_files, name, config.max_row_chars)
    return LoadedRows(_load_file_rows(str(path), subset, split, name))


def _jsonl_files(local: Path, split: str, subset: str | None) -> list[Path]:
    """The jsonl files of the split, when the split is made of jsonl files only."""
    if local.is_file():
        return [local] if local.suffix.lower() == ".jsonl" else []
    files = split_files(local, split, subset) if local.is_dir() else []
    return files if files and all(file.suffix.lower() == ".jsonl" for file in files) else []


def _load_jsonl_rows(files: list[Path], name: str, max_row_chars: int | None) -> LoadedRows:
    try:
        read = read_jsonl(files, max_row_chars=max_row_chars)
    except OSError as error:
        raise UserError(f"Dataset '{name}': cannot read {error.filename or files[0]}: {error.strerror or error}") from error
    shown = ", ".join(str(file) for file in files)
    if not read.rows and not read.bad:
        raise UserError(f"Dataset '{name}': {shown} is empty (no rows); give it at least one JSON object per line.")
    if not read.rows:
        raise UserError(
            f"Dataset '{name}': {shown} has no usable rows; all {len(read.bad)} are bad, "
            f"the first: {read.bad[0]}"
        )
    return LoadedRows(read.rows, read.places, read.bad)


def _load_file_rows(path: str, subset: str | None, split: str, name: str):
    import datasets

    local = Path(path).expanduser()
    try:
        if local.is_file():
            if local.stat().st_size == 0:
                raise UserError(f"Dataset '{name}': {local} is empty (no rows).")
            if local.suffix.lower() in (".csv", ".json"):
                problem = utf8_problem(local.read_bytes())
                if problem:
                    raise UserError(f"Dataset '{name}': {local} is not UTF-8 text: {problem}; save it as UTF-8.")
            builder = _FILE_BUILDERS.get(local.suffix.lower())
            if builder is None:
                raise UserError(
                    f"Dataset '{name}': cannot read {local.name}; use one of "
                    f"{', '.join(sorted(_FILE_BUILDERS))} or a dataset directory."
                )
            # A single file has one split, which datasets calls "train".
            return datasets.load_dataset(builder, data_files=str(local), split="train")
        if local.is_dir():
            return datasets.load_dataset(str(local), name=subset, split=split)
        if local.is_absolute() or path.startswith((".", "~")):
            raise UserError(f"Dataset '{name}': path {path} does not exist.")
        return datasets.load_dataset(path, name=subset, split=split)
    except UserError:
        raise
    except StopIteration as error:  # what datasets raises for a file without rows
        raise UserError(f"Dataset '{name}': {path} is empty (no rows).") from error
    except UnicodeDecodeError as error:
        raise UserError(
            f"Dataset '{name}': {path} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at "
            f"offset {error.start} of a chunk); save it as UTF-8."
        ) from error
    except (ValueError, FileNotFoundError, KeyError, OSError) as error:  # ArrowInvalid is a ValueError
        raise UserError(
            f"Dataset '{name}': cannot read {path} (split={split!r}, subset={subset!r}): {_first_line(error)}. "
            "The file may be truncated or corrupt."
        ) from error
    except Exception as error:  # datasets wraps a parser failure in DatasetGenerationError
        cause = error.__cause__ or error.__context__ or error
        raise UserError(
            f"Dataset '{name}': cannot read {path} (split={split!r}, subset={subset!r}): "
            f"{type(cause).__name__}: {_first_line(cause)}"
        ) from error


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def load_sql_rows(config: StorageConfig) -> LoadedRows:
    """Rows of a ``sql`` storage: the ``tasks`` table's rows stored under this storage's name."""
    from sqlalchemy import select

    from trivium.buffer.sql_engine import get_engine
    from trivium.buffer.sql_schema import TaskModel

    name = config.name
    engine = get_engine(str(config.path or ""))
    with engine.connect() as connection:
        rows = connection.execute(
            select(TaskModel.row).where(TaskModel.buffer == name).order_by(TaskModel.id)
        ).scalars().all()
        connection.commit()
    return LoadedRows([dict(row) for row in rows])


def store_task_rows(path: str, name: str, rows: list[dict[str, Any]]) -> None:
    """Put taskset rows into the ``tasks`` table under ``name`` (for ``storage_type: sql``)."""
    from sqlalchemy import insert

    from trivium.buffer.sql_engine import get_engine, with_retries
    from trivium.buffer.sql_schema import TaskModel

    engine = get_engine(path)

    def add() -> None:
        with engine.begin() as connection:
            connection.execute(insert(TaskModel), [{"buffer": name, "row": row} for row in rows])

    with_retries(add)
