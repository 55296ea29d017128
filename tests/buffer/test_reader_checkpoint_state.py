"""What a checkpoint keeps of the trainer's reader, and how a resumed reader continues from it."""

import json

import pytest

from trivium.buffer import BufferExhausted, create_reader, create_writer
from trivium.buffer.file_storage import JsonlWriter
from trivium.buffer.queue_storage import forget_queues

from .conftest import experience, storage


def _sampled_at(step: int, first: int, count: int):
    return [experience(first + i, explore_step=step) for i in range(count)]


def test_queue_keeps_unread_experiences_up_to_the_explorer_step_and_restores_them_in_order():
    config = storage("ckpt")
    writer, reader = create_writer(config), create_reader(config)
    writer.write(_sampled_at(1, 0, 2) + _sampled_at(2, 2, 2) + _sampled_at(3, 4, 2))
    assert [e.eid for e in reader.read(3, timeout=1)] == ["e0", "e1", "e2"]
    state = json.loads(json.dumps(reader.state_dict(max_explore_step=2)))  # what the checkpoint file holds
    assert [item["experience"]["eid"] for item in state["unread"]] == ["e3"]

    forget_queues()  # a new process: the queue starts empty, the explorer writes step 3 again
    resumed_writer, resumed_reader = create_writer(config), create_reader(config)
    restored = resumed_reader.load_state_dict(state)
    assert (restored.kept, restored.dropped) == (1, 0)
    resumed_writer.write(_sampled_at(3, 4, 2))
    resumed_writer.finish()
    assert [e.eid for e in resumed_reader.read(10, timeout=1)] == ["e3", "e4", "e5"]


def test_queue_restore_drops_what_the_crashed_run_left_after_its_checkpoint():
    config = storage("after_ckpt")
    writer, reader = create_writer(config), create_reader(config)
    writer.write(_sampled_at(1, 0, 2))
    state = reader.state_dict(max_explore_step=1)
    writer.write(_sampled_at(2, 2, 3))  # sampled after the checkpoint: explored again on resume
    restored = reader.load_state_dict(state)
    assert (restored.kept, restored.dropped) == (2, 3)
    writer.finish()
    assert [e.eid for e in reader.read(10, timeout=1)] == ["e0", "e1"]


def test_replay_queue_keeps_use_counts_across_a_restore():
    config = storage("replay_ckpt", replay_buffer={"enable": True, "reuse_cooldown_time": 0.0, "priority_fn": "linear_decay"})
    writer, reader = create_writer(config), create_reader(config)
    writer.write(_sampled_at(1, 0, 2))
    reader.read(1, timeout=1)
    state = reader.state_dict()
    uses = {item["experience"]["eid"]: item["use_count"] for item in state["unread"]}
    assert sorted(uses.values()) == [0, 1]
    forget_queues()
    resumed = create_reader(config)
    assert resumed.load_state_dict(state).kept == 2
    held = dict((e.eid, uses) for e, uses in resumed.queue.unread())
    assert held == uses


def test_sql_reader_makes_exactly_the_checkpointed_rows_unread_again(tmp_path):
    config = storage("sql_ckpt", storage_type="sql", path=str(tmp_path / "buffer.db"), max_read_timeout=0.2)
    writer, reader = create_writer(config), create_reader(config)
    writer.write(_sampled_at(1, 0, 3) + _sampled_at(2, 3, 2))
    assert [e.eid for e in reader.read(2)] == ["e0", "e1"]
    state = reader.state_dict(max_explore_step=1)
    assert state == {"unread_eids": ["e2"]}
    assert [e.eid for e in reader.read(2)] == ["e2", "e3"]  # read after the checkpoint, then the crash

    restored = create_reader(config).load_state_dict(state)
    assert (restored.kept, restored.dropped) == (1, 1)  # e4 (step 2, never read) is dropped
    writer.finish()
    assert [e.eid for e in reader.read(10)] == ["e2"]
    with pytest.raises(BufferExhausted):
        reader.read(1)


def test_jsonl_reader_skips_the_lines_a_checkpoint_had_read(tmp_path):
    path = tmp_path / "experiences.jsonl"
    with JsonlWriter(path) as writer:
        writer.write(_sampled_at(1, 0, 5))
    config = storage("exp", storage_type="file", path=str(path))
    first = create_reader(config)
    first.read(2)
    state = first.state_dict()
    resumed = create_reader(config)
    resumed.load_state_dict(state)
    assert [e.eid for e in resumed.read(10)] == ["e2", "e3", "e4"]


def test_explore_step_survives_every_storage_encoding(tmp_path):
    from trivium.buffer.codec import experience_from_json, experience_to_json, experience_to_row, row_to_experience

    sampled = experience(0, explore_step=7)
    assert experience_from_json(experience_to_json(sampled)).explore_step == 7

    class Row:
        def __init__(self, values):
            self.__dict__.update(values)

    assert row_to_experience(Row(experience_to_row(sampled))).explore_step == 7
