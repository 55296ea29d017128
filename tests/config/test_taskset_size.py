"""Counting taskset rows without loading the dataset: files per split, parquet, csv, SQL."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert

from trivium.buffer.split_files import split_files
from trivium.config.schema import StorageConfig
from trivium.config.taskset_size import count_rows


def test_split_files_follow_dataset_naming(tmp_path):
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"q": list(range(7))}), tmp_path / "data" / "train-00000-of-00001.parquet")
    (tmp_path / "test.jsonl").write_text('{"q": 1}\n\n{"q": 2}\n')
    (tmp_path / "validation.csv").write_text("q\n1\n2\n3\n")
    assert count_rows(StorageConfig(path=str(tmp_path), split="train")) == 7
    assert count_rows(StorageConfig(path=str(tmp_path), split="test")) == 2  # blank lines skipped
    assert count_rows(StorageConfig(path=str(tmp_path), split="validation")) == 3  # header skipped
    assert count_rows(StorageConfig(path=str(tmp_path), split="dev")) is None


def test_unnamed_files_are_the_train_split(tmp_path):
    (tmp_path / "part1.json").write_text(json.dumps([{"q": 1}, {"q": 2}]))
    (tmp_path / "part2.jsonl").write_text('{"q": 3}\n')
    assert [f.name for f in split_files(tmp_path, "train")] == ["part1.json", "part2.jsonl"]
    assert count_rows(StorageConfig(path=str(tmp_path))) == 3
    assert count_rows(StorageConfig(path=str(tmp_path), split="test")) is None


def test_sql_table_and_unknowable_sources(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'tasks.db'}")
    table = Table("math", MetaData(), Column("id", Integer, primary_key=True))
    table.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(insert(table), [{"id": i} for i in range(5)])
    engine.dispose()
    assert count_rows(StorageConfig(name="math", storage_type="sql", path=str(tmp_path / "tasks.db"))) == 5
    assert count_rows(StorageConfig(name="other", storage_type="sql", path=str(tmp_path / "tasks.db"))) is None
    assert count_rows(StorageConfig(path="org/hub-dataset")) is None
    assert count_rows(StorageConfig(name="q", storage_type="queue")) is None
