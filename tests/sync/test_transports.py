"""Weight transports: chosen by name and by where the two sides live; each stages and hands over versions."""

import pytest
import torch

from trivium.sync.checkpoint_transport import CheckpointTransport
from trivium.sync.collective import free_port
from trivium.sync.collective_transport import CollectiveSender, CollectiveTransport
from trivium.sync.memory_transport import MemoryTransport
from trivium.sync.transport import weight_transport


def test_a_broadcast_in_one_process_is_a_hand_over_in_memory():
    assert type(weight_transport("nccl", across_processes=False)) is MemoryTransport
    assert type(weight_transport("nccl", across_processes=True)) is CollectiveTransport
    assert type(weight_transport("checkpoint", across_processes=True, run_dir="/tmp")) is CheckpointTransport
    with pytest.raises(ValueError, match="unknown sync_method 'carrier_pigeon'"):
        weight_transport("carrier_pigeon", across_processes=False)


def test_memory_hands_over_a_snapshot_unless_the_trainer_waits():
    weights = {"w": torch.ones(2)}
    sender = MemoryTransport().sender()
    snapshot = sender.stage_weights(3, weights, copy=True)
    shared = sender.stage_weights(3, weights, copy=False)
    weights["w"].add_(1.0)
    assert snapshot.load()["w"].tolist() == [1.0, 1.0]
    assert shared.load()["w"].tolist() == [2.0, 2.0]


def test_the_collective_sender_broadcasts_the_staged_version_and_drops_older_ones():
    sender = CollectiveSender()
    with pytest.raises(RuntimeError, match="has not joined the weight broadcast group"):
        sender.stage_weights(1, {"w": torch.ones(3)}, copy=True)
    sender.join("127.0.0.1", free_port(), world_size=1, backend="gloo", timeout=30)
    try:
        first = sender.stage_weights(1, {"w": torch.ones(3)}, copy=True)
        second = sender.stage_weights(
            2, {"w": torch.zeros(3), "b": torch.ones(1, dtype=torch.float64)}, copy=True
        )
        assert first.spec == [("w", (3,), "float32")]
        assert second.spec == [("w", (3,), "float32"), ("b", (1,), "float64")]
        # 3 float32 + 1 float64 bytes, in two buckets (one dtype each)
        assert sender.send(trainer=None, version=2) == 3 * 4 + 8
        with pytest.raises(RuntimeError, match="weight version 1 was not staged"):
            sender.send(trainer=None, version=1)
    finally:
        sender.close()
