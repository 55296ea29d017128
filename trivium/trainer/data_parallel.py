"""How one global batch is split over the ranks of a data-parallel trainer, and summed back.

Every rank holds the whole batch (rank 0 hands it to the others) and computes the same
micro-batch plan from it. Rank ``r`` of ``W`` runs micro-batches ``r, r + W, r + 2W, ...``.
Each forward of a sharded model is a collective that every rank must join, so a rank with
fewer micro-batches than the busiest one repeats the first micro-batch with weight 0 (an
exact no-op on gradients and metrics).

Per-row results (logprobs, values) are computed on exactly one rank and are zero on the
others, so a sum across ranks gives every rank the whole-batch tensor one process computes.
A micro-batch's loss weight is its share of the whole batch's normaliser (see
``micro_batch.loss_scale``), the same on any number of ranks; FSDP averages gradients over
the ranks, so the weight is multiplied by the rank count to make that average a sum.
With one rank every method is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class MicroBatchShare:
    rows: list[int]
    counts: bool  # False: a weight-0 repeat that only keeps this rank in the collectives


class DataParallel:
    def __init__(self, *, rank: int = 0, world_size: int = 1):
        self.rank = rank
        self.world_size = world_size

    @property
    def sharded(self) -> bool:
        return self.world_size > 1

    @property
    def gradient_scale(self) -> float:
        """Undo FSDP's mean over ranks: the accumulated gradient is a sum of global shares."""
        return float(self.world_size)

    def micro_batches(self, plan: list[list[int]]) -> list[MicroBatchShare]:
        """This rank's micro-batches of the global ``plan``, padded to the busiest rank's count."""
        mine = plan[self.rank :: self.world_size]
        busiest = -(-len(plan) // self.world_size)
        return [MicroBatchShare(rows, True) for rows in mine] + [
            MicroBatchShare(plan[0], False) for _ in range(busiest - len(mine))
        ]

    def split(self, plan: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
        """(rows this rank computes, repeats it runs only to join the collectives)."""
        shares = self.micro_batches(plan)
        return [s.rows for s in shares if s.counts], [s.rows for s in shares if not s.counts]

    def sum_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum of each rank's (rows it computed, zeros elsewhere): the whole-batch tensor."""
        if self.sharded:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def copy_from_first_rank(self, tensors: list[torch.Tensor]) -> None:
        """Give every rank rank 0's values of ``tensors`` (weights each rank initialised at random)."""
        if self.sharded:
            for tensor in tensors:
                dist.broadcast(tensor.data, src=0)

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Per-key sums of weighted metric totals; a key some ranks lack counts as 0 there."""
        if not self.sharded:
            return metrics
        gathered: list[dict[str, float] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, metrics)
        keys = list(dict.fromkeys(key for part in gathered for key in part))
        return {key: sum(part.get(key, 0.0) for part in gathered) for key in keys}
