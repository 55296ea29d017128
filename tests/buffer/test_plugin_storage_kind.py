"""A storage kind added from outside the package: its own code plus one registration.

The plugin keeps experiences in a Python list per storage name, inside this process. Once
registered, the buffer factory opens it, ``trivium plan`` accepts it, and validation asks
its traits (it is not shared across processes, so a Ray placement is refused).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import yaml

from trivium.buffer import BufferExhausted, BufferReader, BufferWriter, create_reader, create_writer
from trivium.buffer.base import Restored, check_batch_size
from trivium.cli.main import main
from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare
from trivium.config.schema import StorageConfig
from trivium.core.experience import Experience
from trivium.core.storage_kinds import StorageKind, register_storage_kind, unregister_storage_kind
from trivium.errors import UserError

from .conftest import experience


class _Shelf:
    """The list behind one storage name, and how many of its writers are still writing."""

    def __init__(self) -> None:
        self.items: list[Experience] = []
        self.writers = 0
        self.changed = threading.Condition()


_shelves: dict[str, _Shelf] = {}


def _shelf(config: StorageConfig) -> _Shelf:
    return _shelves.setdefault(config.name, _Shelf())


class ListWriter(BufferWriter):
    def __init__(self, config: StorageConfig):
        self.shelf = _shelf(config)
        with self.shelf.changed:
            self.shelf.writers += 1

    def write(self, experiences: list[Experience]) -> None:
        with self.shelf.changed:
            self.shelf.items.extend(experiences)
            self.shelf.changed.notify_all()

    def finish(self) -> None:
        with self.shelf.changed:
            self.shelf.writers -= 1
            self.shelf.changed.notify_all()


class ListReader(BufferReader):
    def __init__(self, config: StorageConfig):
        self.shelf = _shelf(config)
        self.max_read_timeout = float(config.max_read_timeout)

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        check_batch_size(batch_size)
        deadline = time.monotonic() + (self.max_read_timeout if timeout is None else timeout)
        with self.shelf.changed:
            while len(self.shelf.items) < batch_size and self.shelf.writers > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.shelf.changed.wait(left)
            if not self.shelf.items and self.shelf.writers == 0:
                raise BufferExhausted
            batch, self.shelf.items[:batch_size] = self.shelf.items[:batch_size], []
            return batch

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        return {"unread": len(self.shelf.items)}

    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        return Restored(kept=len(self.shelf.items))


LIST_KIND = StorageKind(
    name="python_list",
    durable=False,
    shared_across_processes=False,
    holds_datasets=False,
    replayable=False,
    needs_path=False,
    trainer_reads_experiences=True,
    writer=ListWriter,
    reader=ListReader,
)


@pytest.fixture
def list_kind():
    register_storage_kind(LIST_KIND)
    yield LIST_KIND
    unregister_storage_kind(LIST_KIND.name)
    _shelves.clear()


def test_plugin_kind_writes_and_reads_through_the_factory(list_kind):
    config = StorageConfig(name="shelf", storage_type="python_list")
    writer, reader = create_writer(config), create_reader(config)
    assert isinstance(writer, ListWriter) and isinstance(reader, ListReader)
    writer.write([experience(0), experience(1), experience(2)])
    assert [e.eid for e in reader.read(2, timeout=1)] == ["e0", "e1"]
    writer.finish()
    assert [e.eid for e in reader.read(2, timeout=1)] == ["e2"]
    with pytest.raises(BufferExhausted):
        reader.read(1, timeout=1)


def _config_file(tmp_path, **cluster) -> str:
    config = {
        "project": "demo",
        "name": "plugin_storage",
        "mode": "both",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "model": {"model_path": "/models/tiny", "max_prompt_tokens": 64, "max_response_tokens": 64},
        "cluster": {"gpu_per_node": 0, **cluster},
        "buffer": {
            "batch_size": 2,
            "explorer_input": {"taskset": {"name": "tasks", "path": "/data/tasks"}},
            "trainer_input": {"experience_buffer": {"name": "shelf", "storage_type": "python_list"}},
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def test_plan_accepts_a_registered_kind_and_asks_its_traits(list_kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--config", _config_file(tmp_path)]) == 0
    # Not shared across processes: Ray's separate explorer and trainer processes cannot share it.
    with pytest.raises(ConfigError) as refused:
        prepare(_config_file(tmp_path, placement="ray"))
    assert "python_list lives in one process" in str(refused.value)
    assert "buffer.trainer_input.experience_buffer.storage_type" in str(refused.value)


def test_an_unregistered_kind_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="storage_type.*choose one of: file, queue, sql"):
        prepare(_config_file(tmp_path))
    with pytest.raises(UserError, match="unknown storage_type 'python_list'"):
        create_writer(StorageConfig(name="shelf", storage_type="python_list"))
