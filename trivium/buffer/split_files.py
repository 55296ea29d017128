"""Which files of a local dataset folder make a split, picked the way ``datasets.load_dataset``
picks them: files named after the split (``train.jsonl``, ``test-00000.parquet``) or in a
folder named after it, under the folder, its ``data/`` or its subset's folder; files that
name no split at all form the train split. Read by the task reader and by ``resolve()``,
which counts the rows of a taskset (``trivium.config.taskset_size``).
"""

from __future__ import annotations

from pathlib import Path

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


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
        candidates = [
            file
            for folder in (root, root / "data", root / split)
            if folder.is_dir()
            for file in sorted(folder.iterdir())
            if file.suffix in DATA_SUFFIXES
        ]
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
    named = stem == split or stem.startswith((f"{split}-", f"{split}_", f"{split}."))
    return file.parent.name == split != root.name or named


def _names_any_split(file: Path) -> bool:
    return any(_names_split(file, word, file.parent.parent) for word in _SPLIT_WORDS)
