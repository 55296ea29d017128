"""How an imported veRL job's GPUs are shared between inference engines and the trainer.

veRL runs rollout, reward model and training on the same GPUs in turn; trivium gives each
its own. The rule used for imports: every inference model (the rollout model and each
reward model) gets a quarter of the cluster, rounded down to whole engines of its tensor
parallel size but at least one engine; the trainer keeps every remaining GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from trivium.errors import UserError

INFERENCE_SHARE = 4  # each inference model gets 1/INFERENCE_SHARE of the GPUs


@dataclass(frozen=True)
class GpuSplit:
    rollout_engines: int
    auxiliary_engines: tuple[int, ...]
    trainer_gpus: int


def engines_for(total_gpus: int, tensor_parallel_size: int) -> int:
    if tensor_parallel_size < 1:
        raise UserError(f"tensor parallel size must be at least 1, got {tensor_parallel_size}")
    return max(1, (total_gpus // INFERENCE_SHARE) // tensor_parallel_size)


def split_gpus(total_gpus: int, rollout_tp: int, auxiliary_tps: tuple[int, ...] = ()) -> GpuSplit:
    """Engines per inference model and the trainer's share of ``total_gpus``."""
    if total_gpus < 1:
        raise UserError(f"the cluster needs at least one GPU, got {total_gpus}")
    rollout_engines = engines_for(total_gpus, rollout_tp)
    auxiliary_engines = tuple(engines_for(total_gpus, tp) for tp in auxiliary_tps)
    inference_gpus = rollout_engines * rollout_tp + sum(
        engines * tp for engines, tp in zip(auxiliary_engines, auxiliary_tps)
    )
    trainer_gpus = total_gpus - inference_gpus
    if trainer_gpus < 1:
        raise UserError(
            f"the cluster has {total_gpus} GPU(s) but the inference engines alone need {inference_gpus}; "
            "raise trainer.n_gpus_per_node / trainer.nnodes or lower "
            "actor_rollout_ref.rollout.tensor_model_parallel_size"
        )
    return GpuSplit(rollout_engines, auxiliary_engines, trainer_gpus)
