"""The weight broadcast of Ray runs: buckets, and a real gloo group across processes."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from trivium.sync.collective import WeightBroadcastGroup, buckets, free_port


def test_buckets_split_by_size_and_keep_one_dtype_each():
    spec = [
        ("a", (2, 3), "float32"),  # 24 bytes
        ("b", (4,), "float32"),  # 16 bytes: 40 in all, still within 48
        ("c", (3,), "float32"),  # 12 more would make 52: a new bucket
        ("d", (2,), "bfloat16"),  # another dtype: a new bucket
        ("e", (100,), "float32"),  # larger than a bucket: alone
    ]
    assert [[name for name, _, _ in bucket] for bucket in buckets(spec, bucket_bytes=48)] == [
        ["a", "b"], ["c"], ["d"], ["e"],
    ]


def _receiver(port: int, rank: int, spec, queue) -> None:
    group = WeightBroadcastGroup(address="127.0.0.1", port=port, rank=rank, world_size=3, timeout=60, bucket_bytes=64)
    received = {}
    for bucket in group.receive(spec):
        received.update({name: tensor.clone() for name, tensor in bucket.items()})
    queue.put({name: tensor.tolist() for name, tensor in received.items()})


def test_rank_zero_broadcasts_every_tensor_to_every_engine_bucket_by_bucket():
    weights = {
        "embed.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "norm.weight": torch.tensor([0.5, -1.5]),
        "head.weight": torch.arange(20, dtype=torch.float32).reshape(5, 4) / 7,
    }
    spec = [(name, tuple(t.shape), "float32") for name, t in weights.items()]
    port = free_port()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    receivers = [context.Process(target=_receiver, args=(port, rank, spec, queue)) for rank in (1, 2)]
    for process in receivers:
        process.start()
    sender = WeightBroadcastGroup(address="127.0.0.1", port=port, rank=0, world_size=3, timeout=60, bucket_bytes=64)
    sent = sender.send(weights)
    results = [queue.get(timeout=120) for _ in receivers]
    for process in receivers:
        process.join(timeout=60)
    assert sent == sum(t.numel() * 4 for t in weights.values())
    for result in results:
        assert result == {name: tensor.tolist() for name, tensor in weights.items()}


def test_a_missing_peer_is_an_error_after_the_timeout_not_a_hang():
    with pytest.raises(Exception, match="(?i)timed? ?out|timeout"):
        WeightBroadcastGroup(address="127.0.0.1", port=free_port(), rank=0, world_size=2, timeout=2)
