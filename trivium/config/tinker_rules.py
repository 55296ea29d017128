"""What a run with ``model.tinker.enable`` refuses: the parts of a run that need the weights here.

The Tinker service holds the model and returns logprobs of given tokens; it returns no
entropies, hidden states or values, and places nothing on this machine's devices. So a
Tinker run samples with the ``tinker`` engine, trains the service's own LoRA adapter, and
takes its advantages from the explorer. Each refusal names the key and what to do.
"""

from __future__ import annotations

from trivium.algorithm.advantages import ADVANTAGE_FNS, computed_by_explorer, requires_critic
from trivium.algorithm.presets import PRESETS
from trivium.config.errors import Problem
from trivium.config.modes import traits_of
from trivium.config.none_name import named
from trivium.config.schema import TriviumConfig

SERVICE = "with model.tinker.enable the model trains on the Tinker service"


def check_tinker(config: TriviumConfig, problems: list[Problem]) -> None:
    if not config.model.tinker.enable:
        return
    _check_placement(config, problems)
    _check_algorithm(config, problems)


def _check_placement(config: TriviumConfig, problems: list[Problem]) -> None:
    """Where the run's parts are: the engine, the adapter, the devices, the checkpoints."""
    trainer, cluster = config.trainer, config.cluster
    rollout = config.explorer.rollout_model
    if traits_of(config.mode).explores and rollout.engine_type != "tinker":
        problems.append(
            Problem(
                "explorer.rollout_model.engine_type",
                f"{rollout.engine_type!r}: {SERVICE}, so the rollouts sample from it too; use engine_type tinker (or auto)",
            )
        )
    if config.model.lora_configs:
        problems.append(
            Problem(
                "model.lora_configs",
                f"{SERVICE}, which trains its own adapter: set its rank in model.tinker.rank instead",
            )
        )
    if cluster.uses_ray or cluster.device_type == "cuda":
        problems.append(
            Problem(
                "cluster.placement",
                f"{SERVICE}; a Tinker run places nothing on GPUs or Ray nodes here. Run it in one process "
                "(cluster.placement: local, gpu_per_node: 0)",
            )
        )
    if int(trainer.data_parallel_size or 1) > 1:
        problems.append(
            Problem("trainer.data_parallel_size", f"{SERVICE}; there are no trainer ranks here: set it to 1")
        )
    if trainer.save_hf_checkpoint == "always":
        problems.append(
            Problem(
                "trainer.save_hf_checkpoint",
                f"{SERVICE}; checkpoints record the service's tinker:// paths and export no weights: set it to never",
            )
        )
    if trainer.old_logprobs_source == "decoupled":
        problems.append(
            Problem(
                "trainer.old_logprobs_source",
                "'decoupled' needs a proximal forward pass the service does not run; use auto, recompute or engine",
            )
        )


def _check_algorithm(config: TriviumConfig, problems: list[Problem]) -> None:
    """What the objective needs beyond the logprobs of the sampled tokens."""
    algorithm = config.algorithm
    preset = PRESETS.get(algorithm.algorithm_type)
    needs = [
        (preset is not None and preset.needs_teacher_logprobs, "a teacher model's logprobs"),
        (preset is not None and preset.needs_expert_data, "expert data mixed into the batch"),
    ]
    for needed, what in needs:
        if needed:
            problems.append(
                Problem("algorithm.algorithm_type", f"{algorithm.algorithm_type} needs {what}; {_ONLY}")
            )
    advantage = ADVANTAGE_FNS.get(algorithm.advantage_fn) if named(algorithm.advantage_fn) is not None else None
    if advantage is not None and (requires_critic(advantage) or not computed_by_explorer(advantage)):
        problems.append(
            Problem(
                "algorithm.advantage_fn",
                f"{algorithm.advantage_fn!r} is computed by the trainer from the model (a critic, or logprobs of the "
                f"batch); {SERVICE}. Use a group-based advantage the explorer computes (e.g. grpo, rloo, opmd)",
            )
        )
    entropy_coef = float((algorithm.entropy_loss_fn_args or {}).get("entropy_coef", 0.0))
    if named(algorithm.entropy_loss_fn) is not None and entropy_coef != 0:
        problems.append(
            Problem(
                "algorithm.entropy_loss_fn",
                "the Tinker service returns logprobs of the given tokens only, not the entropy over the vocabulary: "
                "set entropy_loss_fn: none (or entropy_coef: 0)",
            )
        )
    penalty_coef = float((algorithm.kl_penalty_fn_args or {}).get("kl_coef", 0.0))
    if named(algorithm.kl_penalty_fn) is not None and penalty_coef > 0:
        problems.append(
            Problem(
                "algorithm.kl_penalty_fn",
                f"a KL penalty in the reward is computed by the trainer before the advantages; {SERVICE}. "
                "Use kl_loss_fn (the KL as a loss term) instead",
            )
        )


_ONLY = "a Tinker run trains on the sampled experiences with their explorer-computed advantages only"
