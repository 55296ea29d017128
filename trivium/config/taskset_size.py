"""Count the rows of a dataset cheaply, when that is possible without loading it.

Used by resolve() to derive the number of training steps from total_epochs. Only local
files (jsonl, json, parquet, csv) and SQL tables are counted; anything else (a hub name, a
remote URL, a queue) gives None and the step count stays unknown until the run starts.
Files are picked the way ``datasets.load_dataset`` picks them for a split.
"""

from __future__ import annotations

import json
from pathlib import Path

from trivium.config.schema import StorageConfig

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def count_rows(storage: StorageConfig) -> int | None:
    if not storage.path:
        return None
    try:
        if storage.storage_type == "file":
            files = split_files(Path(storage.path), storage.split, storage.subset_name)
            if not files:
                return None
            return sum(_count_file(file) for file in files)
        if storage.storage_type == "sql":
            return _count_sql(storage.path, storage.name)
    except (OSError, ValueError):
        return None
    return None


def split_files(path: Path, split: str, subset_name: str | None = None) -> list[Path]:
    """Data files of ``split`` under ``path`` (a file is its own split)."""
    if path.is_file():
        return [path] if path.suffix in DATA_SUFFIXES else []
    if not path.is_dir():
        return []
    roots = [path / subset_name, path] if subset_name else [path]
    for root in roots:
        if not root.is_dir():
            continue
        candidates = [file for folder in (root, root / "data", root / split) if folder.is_dir()
                      for file in sorted(folder.iterdir()) if file.suffix in DATA_SUFFIXES]
        matching = [file for file in candidates if _names_split(file, split, root)]
        if matching:
            return matching
        # Files that name no split at all form the train split.
        if split == "train" and candidates and not any(_names_any_split(file) for file in candidates):
            return candidates
    return []


_SPLIT_WORDS = ("train", "test", "validation", "valid", "val", "dev", "eval")


def _names_split(file: Path, split: str, root: Path) -> bool:
    stem = file.stem.lower()
    return file.parent.name == split != root.name or stem == split or stem.startswith(f"{split}-") \
        or stem.startswith(f"{split}_") or stem.startswith(f"{split}.")


def _names_any_split(file: Path) -> bool:
    return any(_names_split(file, word, file.parent.parent) for word in _SPLIT_WORDS)


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
