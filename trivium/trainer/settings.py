"""Everything the trainer reads from the resolved config, gathered once at set-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LossSettings:
    # A function left out (the config's ``none``, or null) is None here.
    policy_loss_fn: str = "ppo"
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    advantage_fn: str | None = "grpo"  # None: the experiences carry their advantages (or need none)
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    kl_penalty_fn: str | None = None
    kl_penalty_coef: float = 0.0
    # The adaptive controller of the penalty's coefficient (kl_penalty_fn_args.adaptive).
    kl_penalty_adaptive: bool = False
    kl_penalty_target: float | None = None
    kl_penalty_horizon: float | None = None
    kl_loss_fn: str | None = None
    kl_loss_coef: float = 0.0
    entropy_loss_fn: str | None = None
    entropy_coef: float = 0.0
    loss_agg_mode: str = "token-mean"

    @property
    def needs_reference(self) -> bool:
        from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, needs_reference_logprobs

        uses_kl = (self.kl_loss_fn is not None and self.kl_loss_coef > 0) or (
            self.kl_penalty_fn is not None and self.kl_penalty_coef > 0
        )
        return uses_kl or needs_reference_logprobs(POLICY_LOSS_FNS.get(self.policy_loss_fn))


@dataclass(frozen=True)
class LoRASettings:
    """A LoRA adapter trained on the actor instead of its weights (``trivium/trainer/lora.py``)."""

    rank: int
    alpha: float
    target_modules: str | tuple[str, ...] = "all-linear"
    exclude_modules: str | None = None
    dropout: float = 0.0
    dtype: str = "auto"  # adapter weights' dtype; auto: peft's choice (float32)
    init_path: str | None = None  # an adapter saved by peft to continue training from
    # The rollout engine takes whole weights only: sync W + B @ A instead of the adapter.
    sync_merged: bool = False


@dataclass(frozen=True)
class TinkerSettings:
    """Training on a Tinker service (``trivium/tinker_client``): its LoRA adapter and calls."""

    base_model: str  # the service's name of the model to adapt
    rank: int = 32
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True
    request_timeout: float = 1200.0  # seconds one service call may take (synchronizer.sync_timeout)
    name_prefix: str = "trivium"  # the service's names of saved weights: <prefix>-v<version>, <prefix>-step<N>


@dataclass
class TrainerSettings:
    model_path: str
    critic_model_path: str | None = None
    use_critic: bool = False
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    lr_scheduler_type: str = "constant"
    lr_warmup_steps_ratio: float = 0.0
    lr_warmup_steps: int | None = None
    min_lr_ratio: float = 0.0
    critic_lr: float = 1e-5
    cliprange_value: float = 0.5
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    micro_batch_size: int = 1
    use_dynamic_bsz: bool = True
    max_token_len_per_gpu: int = 16384
    total_steps: int | None = None
    # "auto": reuse the update's own forward when the batch gets one optimizer step (the
    # logprobs are then identical to a separate pass); "recompute": a no-grad pass before
    # updating; "engine": the rollout engine's logprobs (the true behaviour policy).
    old_logprobs_source: str = "auto"
    # "decoupled": the proximal policy as "auto", each token weighted by pi_prox / pi_engine, capped here.
    behaviour_weight_cap: float | None = 5.0
    behaviour_weight_range: tuple[float, float] | None = None
    # Response logprobs over the set the engine's top-k/top-p kept (trainer/sampling_mask.py).
    replay_sampling_mask: bool = False
    # Rows with the same prompt share one prompt pass (see trainer/forward.py).
    share_prompt_forward: bool = True
    # Micro-batches may also run packed: one row of real tokens, no padding (trainer/packing.py).
    pack_sequences: bool = False
    gradient_checkpointing: bool = False
    logit_chunk_tokens: int | None = None  # None: chosen from the vocabulary size (trainer/token_head.py)
    staleness_limit: int | None = None
    staleness_mode: str = "drop"  # or "downweight"
    # Episodes that ended at max_model_len: "mask" keeps them out of the loss, "keep" trains on them.
    truncation: str = "mask"
    loss: LossSettings = field(default_factory=LossSettings)
    lora: LoRASettings | None = None  # None: train all weights
    tinker: TinkerSettings | None = None  # set: the weights train on a Tinker service
    # False when the experiences come from a dataset (sft, dpo): no staleness, no reward metric.
    learns_from_rollouts: bool = True
    dtype: str = "float32"
    device: str = "cpu"
    # model.rope_scaling / model.rope_theta, applied to the models loaded from model_path (models/rope.py)
    rope_scaling: dict[str, Any] | None = None
    rope_theta: float | None = None
    # Ranks of the data-parallel trainer; over N > 1 the models are sharded with FSDP2
    # (trainer/rank_group.py starts the other ranks).
    data_parallel_size: int = 1
    # fsdp2 (trainer_strategy fsdp or fsdp2): shards over the ranks; ddp: whole models on every
    # rank, gradients all-reduced; None (trainer_strategy none): one rank only.
    strategy: str | None = "fsdp2"
    # FSDP2's CPUOffloadPolicy: parameter and gradient shards (so the optimizer step) in CPU memory.
    param_offload: bool = False
    # Seconds a rank waits in one collective, and a rank may go without a heartbeat before rank 0
    # ends the run naming it (synchronizer.sync_timeout; trainer/rank_watch.py).
    collective_timeout: float = 1200.0
    # torch threads of the training thread (None: the process default); set when the trainer
    # shares one CPU with engines that run at the same time.
    cpu_threads: int | None = None
