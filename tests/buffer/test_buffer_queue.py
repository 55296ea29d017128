import asyncio
import threading
import time

import pytest
import torch

from trivium.buffer import BufferExhausted, create_reader, create_writer
from trivium.buffer.queue_storage import get_queue

from .conftest import experience, storage


def test_same_name_in_one_process_is_one_queue():
    writer = create_writer(storage("shared"))
    reader = create_reader(storage("shared"))
    assert writer.queue is reader.queue
    writer.write([experience(0), experience(1)])
    assert [e.eid for e in reader.read(2, timeout=1)] == ["e0", "e1"]


def test_fifo_order_and_exhaustion_after_finish():
    config = storage("fifo")
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(i) for i in range(5)])
    writer.finish()
    assert [e.eid for e in reader.read(3)] == ["e0", "e1", "e2"]
    # Fewer than asked are left and every writer finished: a partial batch, then the end.
    assert [e.eid for e in reader.read(3)] == ["e3", "e4"]
    with pytest.raises(BufferExhausted):
        reader.read(3)


def test_exhaustion_waits_for_every_writer():
    config = storage("two_writers")
    first, second = create_writer(config), create_writer(config)
    reader = create_reader(config)
    first.write([experience(0)])
    first.finish()
    assert len(reader.read(1, timeout=1)) == 1
    assert reader.read(1, timeout=0.05) == []  # second writer still running: just a timeout
    second.finish()
    with pytest.raises(BufferExhausted):
        reader.read(1, timeout=5)


def test_read_timeout_returns_partial_batch():
    config = storage("partial", max_read_timeout=0.1)
    create_writer(config).write([experience(0)])
    start = time.monotonic()
    batch = create_reader(config).read(4)
    assert [e.eid for e in batch] == ["e0"]
    assert 0.09 <= time.monotonic() - start < 1.0


def test_read_blocks_until_a_full_batch_arrives():
    config = storage("blocking")
    writer, reader = create_writer(config), create_reader(config)

    def produce():
        for i in range(4):
            time.sleep(0.02)
            writer.write([experience(i)])

    thread = threading.Thread(target=produce)
    thread.start()
    batch = reader.read(4, timeout=5)
    thread.join()
    assert [e.eid for e in batch] == ["e0", "e1", "e2", "e3"]


def test_capacity_makes_writers_wait_for_readers():
    config = storage("bounded", capacity=2)
    writer, reader = create_writer(config), create_reader(config)
    writer.write([experience(0), experience(1)])
    done = threading.Event()
    thread = threading.Thread(target=lambda: (writer.write([experience(2)]), done.set()))
    thread.start()
    assert not done.wait(0.1)  # full: the third write waits
    assert len(reader.read(1, timeout=1)) == 1
    assert done.wait(2)
    thread.join()
    assert len(get_queue(config)) == 2


def test_concurrent_producers_lose_nothing():
    config = storage("many")
    reader = create_reader(config)
    writers = [create_writer(config) for _ in range(4)]

    def produce(k, writer):
        for i in range(50):
            writer.write([experience(k * 1000 + i)])
        writer.finish()

    threads = [threading.Thread(target=produce, args=(k, w)) for k, w in enumerate(writers)]
    for thread in threads:
        thread.start()
    seen = []
    while True:
        try:
            seen.extend(reader.read(64, timeout=5))
        except BufferExhausted:
            break
    for thread in threads:
        thread.join()
    assert sorted(e.eid for e in seen) == sorted(f"e{k * 1000 + i}" for k in range(4) for i in range(50))


def test_async_read_and_write():
    config = storage("async")
    writer, reader = create_writer(config), create_reader(config)

    async def scenario():
        pending = asyncio.ensure_future(reader.read_async(2, timeout=5))
        await writer.write_async([experience(0), experience(1)])
        return await pending

    batch = asyncio.run(scenario())
    assert [e.eid for e in batch] == ["e0", "e1"]
    assert torch.equal(batch[0].tokens, experience(0).tokens)


def test_bad_batch_size_and_storage_type_are_clear():
    from trivium.errors import UserError

    with pytest.raises(ValueError, match="batch_size"):
        create_reader(storage("bs")).read(0)
    with pytest.raises(UserError, match="storage_type"):
        create_writer(storage("x", storage_type="redis"))


@pytest.mark.parametrize("mirror_name", ["mirror.jsonl", "mirror.db"])
def test_restart_requeues_only_unread_experiences(tmp_path, mirror_name):
    from trivium.buffer.queue_storage import forget_queues

    config = storage("mirrored", path=str(tmp_path / mirror_name))
    create_writer(config).write([experience(i) for i in range(4)])
    assert [e.eid for e in create_reader(config).read(1, timeout=1)] == ["e0"]
    forget_queues()  # as if the process had restarted
    restored = create_reader(config).read(10, timeout=0.05)
    assert [e.eid for e in restored] == ["e1", "e2", "e3"]
    assert torch.equal(restored[0].logprobs, experience(1).logprobs)


def test_unknown_mirror_path_is_a_user_error(tmp_path):
    from trivium.errors import UserError

    with pytest.raises(UserError, match=".jsonl"):
        create_writer(storage("odd", path=str(tmp_path / "backup.txt")))
