"""FSDP2 for the trainer's models: sharding (or replication), gradient clipping and gathering whole weights.

``shard_model`` applies ``torch.distributed.fsdp.fully_shard`` to every transformer block
(the classes a model lists in ``_no_split_modules``) and then to the whole model, over all
ranks of the default process group. After it, parameters are DTensors holding this rank's
shard; forward and backward gather and reduce-scatter them. Frozen parameters (a LoRA
actor's base weights, see ``lora.py``) are sharded the same way and get no gradients.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

DEFAULT_BUCKET_BYTES = 256 * 1024 * 1024


def shard_model(
    model: torch.nn.Module, *, device_type: str, world_size: int, replicate: bool = False, offload_params: bool = False
) -> torch.nn.Module:
    """Shard ``model`` in place over ``world_size`` ranks; returns it.

    ``replicate``: data parallel without sharding (DDP's layout): a (world_size, 1) mesh, whose
    replicate dimension holds every rank and whose shard dimension holds one, so each rank
    keeps the whole weights and FSDP2 all-reduces the gradients. Everything else (DTensor
    weights, checkpoints, gathering for a sync) is the sharded path's.
    """
    if replicate:
        mesh = init_device_mesh(device_type, (world_size, 1), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device_type, (world_size,))
    options = {"mesh": mesh}
    if offload_params:
        # Sharded parameters and gradients live in CPU memory; the optimizer steps there.
        options["offload_policy"] = CPUOffloadPolicy()
    block_names = set()
    for module in model.modules():
        block_names.update(getattr(module, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, **options)
    fully_shard(model, **options)
    return model


def clip_gradients(parameters, max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm (over every shard of every rank); returns the norm before clipping."""
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return torch.tensor(0.0)
    norm = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=2.0, foreach=True)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()  # the local norms' reduction across ranks
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
    return norm


def whole_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) weight gathered whole on every rank (a collective); others as they are."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def full_weight_buckets(
    tensors: Iterable[tuple[str, torch.Tensor]], *, bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> Iterator[dict[str, torch.Tensor]]:
    """Named tensors (a model's ``state_dict().items()``, or already whole ones) gathered whole,
    about ``bucket_bytes`` at a time.

    Every rank must iterate it to the end (each gather is a collective); each bucket is a
    CPU copy, so a consumer that drops a bucket before the next keeps memory to about one
    bucket above the shard.
    """
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in tensors:
        whole = whole_tensor(tensor)
        bucket[name] = whole.detach().to("cpu", copy=True)
        size += whole.numel() * whole.element_size()
        if size >= bucket_bytes:
            yield bucket
            bucket, size = {}, 0
    if bucket:
        yield bucket
