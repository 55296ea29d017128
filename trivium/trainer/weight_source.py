"""The trainer's side of a weight sync: what it sends, gathered from its ranks when sharded.

``WeightSource`` is the part of ``Trainer`` that hands weights to the synchronizer: the
tensors a sync carries (whole weights, a LoRA adapter, or merged weights), and, on a trainer
sharded over several ranks, the ways of gathering them without holding the whole model on
rank 0 (bucket files, or staged shards gathered bucket by bucket while broadcasting). It
reads the trainer's actor and settings; it never trains. Methods that gather are collectives:
``@on_every_rank`` runs them on every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file

from trivium.sync.collective import TensorSpec, buckets, tensor_spec
from trivium.trainer import lora
from trivium.trainer.fsdp import DEFAULT_BUCKET_BYTES, full_weight_buckets, whole_tensor
from trivium.trainer.rank_group import on_every_rank

if TYPE_CHECKING:
    from trivium.core.experience import Experience
    from trivium.trainer.data_parallel import DataParallel
    from trivium.trainer.rank_group import RankGroup
    from trivium.trainer.settings import TrainerSettings


class WeightSource:
    """Mixed into ``Trainer``, which sets these attributes."""

    actor: torch.nn.Module
    settings: TrainerSettings
    parallel: DataParallel
    rank_group: RankGroup | None
    pad_token_id: int
    # Sharded: this rank's shards of weight versions staged for a streamed broadcast
    staged_shards: dict[int, dict[str, torch.Tensor]]

    def sync_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """What a sync sends, name by name: the actor's weights; under LoRA the adapter alone
        (the receiver merges it into its base), or whole merged weights when the rollout engine
        cannot apply an adapter. Sharded: every rank must iterate to the end (gathers)."""
        if self.settings.lora is None:
            return iter(self.actor.state_dict().items())
        if self.settings.lora.sync_merged:
            return lora.merged_tensors(self.actor)
        return lora.adapter_tensors(self.actor)

    @on_every_rank
    def weights_for_sync(self) -> dict[str, torch.Tensor]:
        """The tensors of ``sync_tensors``, detached; the receiver copies them into its own model.

        Sharded over several ranks: whole tensors gathered bucket by bucket into CPU memory on
        rank 0 (empty elsewhere).
        """
        if self.parallel.sharded:
            weights: dict[str, torch.Tensor] = {}
            for bucket in full_weight_buckets(self.sync_tensors()):
                if self.rank_group.leads:
                    weights.update(bucket)
            return weights
        return {name: tensor.detach() for name, tensor in self.sync_tensors()}

    @on_every_rank
    def write_sync_weights(self, directory: str, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> dict[str, float]:
        """Sharded: gather the tensors of ``sync_tensors`` bucket by bucket and write each bucket to its own file.

        Rank 0 writes ``bucket_00000.safetensors``, ``bucket_00001.safetensors``, ... into
        ``directory`` and drops each bucket before gathering the next, so its memory holds
        about one bucket above the shard (``weights_for_sync`` holds the whole model). Returns
        ``sync/buckets`` and ``sync/largest_bucket_bytes`` (zeros on the other ranks).
        """
        if not self.parallel.sharded:
            raise RuntimeError("write_sync_weights streams gathered shards: it needs several trainer ranks")
        leads = self.rank_group.leads
        if leads:
            Path(directory).mkdir(parents=True, exist_ok=True)
        count, largest = 0, 0
        for index, bucket in enumerate(full_weight_buckets(self.sync_tensors(), bucket_bytes=bucket_bytes)):
            if leads:
                save_file(bucket, str(Path(directory) / f"bucket_{index:05d}.safetensors"))
                count += 1
                largest = max(largest, sum(t.numel() * t.element_size() for t in bucket.values()))
            del bucket
        return {"sync/buckets": float(count), "sync/largest_bucket_bytes": float(largest)}

    @on_every_rank
    def stage_shards(self, version: int) -> list[TensorSpec]:
        """Sharded: keep a copy of this rank's shards of the actor as ``version``.

        Each rank holds one shard more, rank 0 no whole model; ``send_staged_shards`` gathers
        the version later, while training goes on. Returns the whole tensors' layout.
        """
        if not self.parallel.sharded or self.settings.lora is not None:
            raise RuntimeError("stage_shards keeps the shards of whole weights: it needs several ranks and no LoRA")
        snapshot = {name: tensor.detach().clone() for name, tensor in self.actor.state_dict().items()}
        self.staged_shards[version] = snapshot
        return tensor_spec(snapshot)

    @on_every_rank(leader_only=("send",))
    def send_staged_shards(self, version: int, *, bucket_bytes: int, send: Callable[[list[torch.Tensor]], int] | None = None) -> int:
        """Gather staged ``version`` one bucket at a time (the buckets of ``sync.collective.buckets``);
        rank 0 passes each bucket to ``send`` and drops it before the next. Returns the bytes sent
        (0 on the other ranks). Older staged versions are dropped.
        """
        snapshot = self.staged_shards[version]
        for old in [v for v in self.staged_shards if v < version]:
            del self.staged_shards[old]
        sent = 0
        for bucket in buckets(tensor_spec(snapshot), bucket_bytes):
            whole = [whole_tensor(snapshot[name]) for name, _, _ in bucket]
            if self.rank_group.leads:
                sent += send(whole)
            del whole
        return sent

    @on_every_rank
    def probe_logprobs(self, probes: list[Experience]) -> list[torch.Tensor]:
        """Response logprobs of a few experiences, as the self-check of a weight sync compares them."""
        from trivium.trainer.forward import trainer_logprobs

        return trainer_logprobs(self.actor, probes, self.pad_token_id)
