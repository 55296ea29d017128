import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trivium.buffer import BufferExhausted, create_reader, create_writer
from trivium.buffer.sql_engine import dispose_engine
from trivium.buffer.sql_store import SqlExperienceStore
from trivium.errors import UserError

from .conftest import experience, storage


def sql_storage(path, name="exp", **fields):
    return storage(name, storage_type="sql", path=str(path), **fields)


def test_roundtrip_keeps_every_field(tmp_path):
    config = sql_storage(tmp_path / "buffer.db")
    original = experience(3, advantages=torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5]))
    writer = create_writer(config)
    writer.write([original])
    (loaded,) = create_reader(config).read(1, timeout=1)
    for name in ("tokens", "logprobs", "action_mask", "advantages"):
        assert torch.equal(getattr(loaded, name), getattr(original, name)), name
    assert loaded.tokens.dtype == torch.long and loaded.action_mask.dtype == torch.bool
    assert loaded.returns is None
    for name in ("eid", "group_id", "task_id", "prompt_length", "reward", "prompt_text", "info"):
        assert getattr(loaded, name) == getattr(original, name), name


def test_each_row_goes_to_one_reader_and_end_after_finish(tmp_path):
    config = sql_storage(tmp_path / "buffer.db")
    writer = create_writer(config)
    writer.write([experience(i) for i in range(5)])
    first, second = create_reader(config), create_reader(config)
    got = first.read(2, timeout=1) + second.read(2, timeout=1)
    assert [e.eid for e in got] == ["e0", "e1", "e2", "e3"]
    assert [e.eid for e in second.read(2, timeout=0.05)] == ["e4"]
    writer.finish()
    with pytest.raises(BufferExhausted):
        first.read(2, timeout=1)


def test_partial_batch_after_timeout(tmp_path):
    config = sql_storage(tmp_path / "buffer.db", max_read_timeout=0.1)
    create_writer(config).write([experience(0)])
    assert [e.eid for e in create_reader(config).read(5)] == ["e0"]


def test_buffers_sharing_a_database_stay_apart(tmp_path):
    path = tmp_path / "shared.db"
    create_writer(sql_storage(path, name="a")).write([experience(0)])
    create_writer(sql_storage(path, name="b")).write([experience(1)])
    assert [e.eid for e in create_reader(sql_storage(path, name="b")).read(5, timeout=0.05)] == ["e1"]


def documented_snippet() -> str:
    """The plain-SQLAlchemy example of docs/buffer.md, exactly as users read it."""
    text = (Path(__file__).parents[2] / "docs" / "buffer.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (snippet,) = [block for block in blocks if "ExperienceModel" in block]
    return snippet


def test_documented_snippet_reads_the_database_with_plain_sqlalchemy(tmp_path, capsys):
    path = f"sqlite:///{tmp_path / 'buffer.db'}"
    create_writer(sql_storage(path)).write([experience(i) for i in range(6)])
    namespace = {"path": path}
    exec(documented_snippet(), namespace)
    experiences = namespace["experiences"]
    assert [e.response_text for e in experiences] == [f"response {i}" for i in range(4)]
    assert torch.equal(experiences[2].tokens, experience(2).tokens)
    assert "prompt 0 -> response 0" in capsys.readouterr().out
    namespace["session"].close()


def test_corrupt_database_is_a_user_error(tmp_path):
    path = tmp_path / "broken.db"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(UserError, match="corrupt or not a SQLite file"):
        create_writer(sql_storage(path))
    dispose_engine(str(path))


def test_missing_path_is_a_user_error():
    with pytest.raises(UserError, match="path"):
        create_writer(storage("nopath", storage_type="sql"))


WRITER = """
import sys
from trivium.buffer.sql_store import SqlExperienceStore
from trivium.core.experience import Experience

path, worker = sys.argv[1], sys.argv[2]
store = SqlExperienceStore(path, "exp")
for i in range(40):
    store.append([Experience(tokens=list(range(16)), prompt_length=4, eid=f"w{worker}-{i}")])
"""


@pytest.mark.slow
def test_several_writer_processes(tmp_path):
    path = str(tmp_path / "buffer.db")
    SqlExperienceStore(path, "exp")  # create the tables once
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    workers = [subprocess.Popen([sys.executable, "-c", WRITER, path, str(k)], env=env) for k in range(3)]
    assert [process.wait(60) for process in workers] == [0, 0, 0]
    assert SqlExperienceStore(path, "exp").count() == 120


@pytest.mark.postgres
def test_postgres_roundtrip_and_concurrent_readers(postgres_url):
    config = sql_storage(postgres_url, name="pg")
    writer = create_writer(config)
    writer.write([experience(i) for i in range(10)])
    readers = [create_reader(config) for _ in range(2)]
    got = readers[0].read(4, timeout=1) + readers[1].read(4, timeout=1) + readers[0].read(4, timeout=0.1)
    assert sorted(e.eid for e in got) == sorted(f"e{i}" for i in range(10))
    assert torch.equal(got[0].logprobs, experience(0).logprobs)
    writer.finish()
    with pytest.raises(BufferExhausted):
        readers[1].read(1, timeout=1)


@pytest.mark.postgres
def test_view_command_on_postgres(postgres_url, capsys):
    from trivium.cli.main import main

    create_writer(sql_storage(postgres_url, name="pgview")).write([experience(7)])
    assert main(["view", "--db", postgres_url, "--buffer", "pgview"]) == 0
    assert "response 7" in capsys.readouterr().out
