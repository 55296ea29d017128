"""Loading the rows of a taskset or training dataset from files or a SQL ``tasks`` table.

Owns the mapping from a storage config to a random-access sequence of row dicts:
``datasets.load_dataset`` for files (a directory in Hugging Face layout, or one
jsonl/json/parquet/csv file), and the ``tasks`` table (rows of this storage's name) for SQL.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from trivium.buffer.base import option
from trivium.errors import UserError

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def format_dict(config: Any) -> dict[str, Any]:
    """The storage's ``format`` section as a plain dict (empty when absent)."""
    fmt = option(config, "format")
    if fmt is None:
        return {}
    if dataclasses.is_dataclass(fmt):
        return dataclasses.asdict(fmt)
    if isinstance(fmt, dict):
        return dict(fmt)
    return {k: v for k, v in vars(fmt).items() if not k.startswith("_")}


def load_rows(config: Any) -> Sequence[dict[str, Any]]:
    storage_type = option(config, "storage_type", "file")
    name = option(config, "name", "?")
    if storage_type == "sql":
        return _load_sql_rows(config)
    if storage_type != "file":
        raise UserError(
            f"Dataset '{name}' has storage_type {storage_type!r}; tasksets and training datasets "
            "are read from 'file' or 'sql' storage."
        )
    path = option(config, "path")
    if not path:
        raise UserError(f"Dataset '{name}' needs a `path` (a directory or a jsonl/parquet file).")
    return _load_file_rows(str(path), option(config, "subset_name"), option(config, "split", "train"), name)


def _load_file_rows(path: str, subset: str | None, split: str, name: str):
    import datasets

    local = Path(path).expanduser()
    try:
        if local.is_file():
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
    except (ValueError, FileNotFoundError, KeyError) as error:
        raise UserError(f"Dataset '{name}' at {path} (split={split!r}, subset={subset!r}): {error}") from error


def _load_sql_rows(config: Any) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from trivium.buffer.sql_engine import get_engine
    from trivium.buffer.sql_schema import TaskModel

    name = option(config, "name", "")
    engine = get_engine(str(option(config, "path", "")))
    with engine.connect() as connection:
        rows = connection.execute(
            select(TaskModel.row).where(TaskModel.buffer == name).order_by(TaskModel.id)
        ).scalars().all()
        connection.commit()
    return [dict(row) for row in rows]


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
