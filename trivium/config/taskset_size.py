"""Count the rows of a dataset cheaply, when that is possible without loading it.

Used by resolve() to derive the number of training steps from total_epochs. A storage kind
counts its rows with the ``count_rows`` it registered; the ``file`` and ``sql`` counters
are here: local files (jsonl, json, parquet, csv) and SQL tables. Anything else (a hub
name, a remote URL, a queue) gives None and the step count stays unknown until the run starts.
Files are picked the way the buffer reads them (``trivium.buffer.split_files``).
"""

from __future__ import annotations

import json
from pathlib import Path

from trivium.buffer.split_files import split_files
from trivium.config.schema import StorageConfig
from trivium.core.storage_kinds import storage_kind


def count_rows(storage: StorageConfig) -> int | None:
    """Rows of ``storage``, counted by its kind's ``count_rows`` (None when it cannot count them)."""
    if not storage.path:
        return None
    try:
        return storage_kind(storage.storage_type).row_count(storage)
    except (OSError, ValueError):
        return None


def count_file_rows(storage: StorageConfig) -> int | None:
    files = split_files(Path(storage.path), storage.split, storage.subset_name)
    if not files:
        return None
    return sum(_count_file(file) for file in files)


def count_sql_rows(storage: StorageConfig) -> int | None:
    return _count_sql(storage.path, storage.name)


def _count_file(file: Path) -> int:
    if file.suffix == ".jsonl":
        with file.open("rb") as handle:
            return sum(1 for line in handle if line.strip())
    if file.suffix == ".json":
        data = json.loads(file.read_text())
        if isinstance(data, list):
            return len(data)
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            return len(data["data"])
        raise ValueError(f"cannot count rows of {file}")
    if file.suffix == ".parquet":
        import pyarrow.parquet as parquet

        return parquet.ParquetFile(file).metadata.num_rows
    if file.suffix == ".csv":
        with file.open("rb") as handle:
            return max(sum(1 for line in handle if line.strip()) - 1, 0)
    raise ValueError(f"unsupported data file {file}")


def _count_sql(path: str, table: str) -> int | None:
    from sqlalchemy import create_engine, func, inspect, select
    from sqlalchemy import table as sql_table

    url = path if "://" in path else f"sqlite:///{path}"
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        return None
    engine = create_engine(url)
    try:
        if not inspect(engine).has_table(table):
            return None
        with engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(sql_table(table))).scalar_one())
    finally:
        engine.dispose()
