"""Weight broadcast between processes: the ``nccl`` sync method when components are Ray actors.

A process group of its own joins the trainer (rank 0) and every rollout engine (ranks 1..N):
``gloo`` on CPU, ``nccl`` on GPUs; the same code runs both. It is built from a TCP store and
does not touch ``torch.distributed``'s default group, which stays free for the trainer's own
data parallelism. The trainer flattens its tensors into buckets of at most ``bucket_bytes``
(one dtype per bucket) and broadcasts them one by one, so a receiver holds at most one bucket
besides its model. Every collective has the sync timeout: a peer that died makes the others
fail with an error, never hang.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

DEFAULT_BUCKET_BYTES = 256 * 2**20

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}

TensorSpec = tuple[str, tuple[int, ...], str]  # name, shape, dtype name


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def tensor_spec(tensors: dict[str, torch.Tensor]) -> list[TensorSpec]:
    """(name, shape, dtype name) of each tensor, in order: what a receiver allocates."""
    return [(name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in tensors.items()]


def buckets(spec: list[TensorSpec], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Iterator[list[TensorSpec]]:
    """Consecutive runs of ``spec`` with one dtype and at most ``bucket_bytes`` (a larger tensor goes alone)."""
    bucket: list[TensorSpec] = []
    size = 0
    for entry in spec:
        name, shape, dtype = entry
        nbytes = _numel(shape) * DTYPES[dtype].itemsize
        if bucket and (dtype != bucket[0][2] or size + nbytes > bucket_bytes):
            yield bucket
            bucket, size = [], 0
        bucket.append(entry)
        size += nbytes
    if bucket:
        yield bucket


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


class WeightBroadcastGroup:
    def __init__(
        self,
        *,
        address: str,
        port: int,
        rank: int,
        world_size: int,
        backend: str = "gloo",
        timeout: float = 1200,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ):
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.bucket_bytes = bucket_bytes
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        wait = timedelta(seconds=timeout)
        self.store = dist.TCPStore(address, port, world_size, rank == 0, timeout=wait)
        if backend == "nccl":
            self.group = dist.ProcessGroupNCCL(self.store, rank, world_size)
        elif backend == "gloo":
            self.group = dist.ProcessGroupGloo(self.store, rank, world_size, wait)
        else:
            raise ValueError(f"unknown broadcast backend {backend!r}; use gloo or nccl")

    def _broadcast(self, tensor: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([tensor], options).wait()

    def send(self, weights: dict[str, torch.Tensor]) -> int:
        """Rank 0: broadcast ``weights`` bucket by bucket; returns the bytes sent."""
        spec = tensor_spec(weights)
        return sum(self.send_bucket([weights[name] for name, _, _ in bucket]) for bucket in buckets(spec, self.bucket_bytes))

    def send_bucket(self, tensors: list[torch.Tensor]) -> int:
        """Rank 0: broadcast one bucket of ``buckets(spec)``, its tensors in spec order; returns its bytes.

        A sender that gathers its tensors a bucket at a time (a sharded trainer) calls this per
        bucket, so it never holds more than one.
        """
        flat = torch.cat([tensor.detach().reshape(-1) for tensor in tensors]).to(self.device)
        self._broadcast(flat)
        return flat.numel() * flat.element_size()

    def receive(self, spec: list[TensorSpec]) -> Iterator[dict[str, torch.Tensor]]:
        """Ranks 1..N: the tensors of ``spec``, one bucket at a time (load each before the next)."""
        for bucket in buckets(spec, self.bucket_bytes):
            dtype = DTYPES[bucket[0][2]]
            flat = torch.empty(sum(_numel(shape) for _, shape, _ in bucket), dtype=dtype, device=self.device)
            self._broadcast(flat)
            tensors, offset = {}, 0
            for name, shape, _ in bucket:
                count = _numel(shape)
                tensors[name] = flat[offset : offset + count].view(shape)
                offset += count
            yield tensors

    def close(self) -> None:
        self.group = None
        self.store = None
