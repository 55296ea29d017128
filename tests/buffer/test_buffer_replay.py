import time

import pytest

from trivium.buffer import BufferExhausted, create_reader, create_writer
from trivium.buffer.replay import PRIORITY_FUNCTIONS, ReplayPolicy
from trivium.config.schema import ReplayBufferConfig
from trivium.errors import UserError

from .conftest import experience, storage


def replay_storage(name, **replay):
    return storage(name, replay_buffer={"enable": True, **replay})


def test_linear_decay_formula():
    score = PRIORITY_FUNCTIONS.get("linear_decay")(decay=0.5)
    # priority = model_version - decay * use_count = 7 - 0.5 * 3
    assert score(experience(0, model_version=7), 3) == pytest.approx(5.5)


def test_randomized_variant_retires_at_use_count_limit_and_is_seeded():
    build = PRIORITY_FUNCTIONS.get("linear_decay_use_count_control_randomization")
    first = build(decay=1.0, use_count_limit=2, sigma=0.3, seed=4)
    second = build(decay=1.0, use_count_limit=2, sigma=0.3, seed=4)
    exp = experience(0, model_version=5)
    values = [first(exp, 1) for _ in range(5)]
    assert values == [second(exp, 1) for _ in range(5)]
    assert all(abs(v - 4.0) < 2.0 for v in values) and len(set(values)) == 5
    assert first(exp, 2) is None
    noiseless = build(decay=1.0, use_count_limit=3, sigma=0.0)
    assert noiseless(exp, 2) == pytest.approx(3.0)


def test_newest_model_version_is_read_first():
    config = replay_storage("versions")
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(0, model_version=1), experience(1, model_version=3), experience(2, model_version=2)])
    assert [e.eid for e in reader.read(3, timeout=1)] == ["e1", "e2", "e0"]


def test_no_cooldown_means_no_reuse():
    config = replay_storage("once", reuse_cooldown_time=None)
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(0)])
    assert len(reader.read(1, timeout=1)) == 1
    assert reader.read(1, timeout=0.05) == []


def test_reuse_after_cooldown_counts_uses_and_decays_priority():
    config = replay_storage("reuse", reuse_cooldown_time=0.05, priority_fn_args={"decay": 2.0})
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(0, model_version=5)])
    first = reader.read(1, timeout=1)[0]
    assert first.info["use_count"] == 1
    assert reader.read(1, timeout=0.01) == []  # cooling down
    again = reader.read(1, timeout=1)[0]
    assert again.eid == "e0" and again.info["use_count"] == 2
    # Used twice (priority 5 - 2*2 = 1) vs a fresh version-2 experience (priority 2).
    time.sleep(0.06)
    writer.write([experience(1, model_version=2)])
    assert [e.eid for e in reader.read(2, timeout=1)] == ["e1", "e0"]


def test_capacity_drops_lowest_priority_with_replay():
    config = replay_storage("evict", reuse_cooldown_time=10)
    config.capacity = 2
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(0, model_version=1), experience(1, model_version=5), experience(2, model_version=3)])
    assert [e.eid for e in reader.read(3, timeout=0.05)] == ["e1", "e2"]
    assert writer.queue.dropped == 1


def test_finish_stops_reuse():
    config = replay_storage("finish", reuse_cooldown_time=0.01)
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(0)])
    reader.read(1, timeout=1)
    writer.finish()
    with pytest.raises(BufferExhausted):
        reader.read(1, timeout=1)


def test_unknown_priority_fn_is_a_user_error():
    with pytest.raises(UserError, match="linear_decay"):
        ReplayPolicy.from_config(ReplayBufferConfig(enable=True, priority_fn="linear_decy"))
    with pytest.raises(UserError, match="priority_fn_args"):
        ReplayPolicy.from_config(ReplayBufferConfig(enable=True, priority_fn_args={"slope": 1}))
    assert ReplayPolicy.from_config(ReplayBufferConfig(enable=False)) is None
