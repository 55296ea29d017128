"""Algorithm presets: what ``algorithm.algorithm_type`` fills in when a key is left unset.

Plain data only. The config resolver reads this table; the trainer reads the resolved
config, never this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AlgorithmPreset:
    advantage_fn: str
    policy_loss_fn: str
    kl_penalty_fn: str = "none"
    kl_loss_fn: str = "k2"
    entropy_loss_fn: str = "default"
    sample_strategy: str = "default"
    loss_agg_mode: str = "token-mean"
    # Needs several samples per task (the group) to compute advantages.
    group_based: bool = False
    use_critic: bool = False
    # Trains from a dataset, so only train mode makes sense.
    train_only: bool = False
    # Forced repeat_times (dpo reads pairs).
    fixed_repeat_times: int | None = None
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, AlgorithmPreset] = {
    "ppo": AlgorithmPreset(advantage_fn="ppo", policy_loss_fn="ppo", use_critic=True),
    "grpo": AlgorithmPreset(advantage_fn="grpo", policy_loss_fn="ppo", group_based=True),
    "opmd": AlgorithmPreset(advantage_fn="opmd", policy_loss_fn="opmd", group_based=True),
    "rloo": AlgorithmPreset(advantage_fn="rloo", policy_loss_fn="ppo", group_based=True),
    "reinforceplusplus": AlgorithmPreset(advantage_fn="reinforceplusplus", policy_loss_fn="ppo"),
    "remax": AlgorithmPreset(advantage_fn="remax", policy_loss_fn="ppo"),
    "gspo": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="gspo", group_based=True, loss_agg_mode="seq-mean-token-mean"
    ),
    "cispo": AlgorithmPreset(advantage_fn="grpo", policy_loss_fn="cispo", group_based=True),
    "mix": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="mix", group_based=True, sample_strategy="mix"
    ),
    "sft": AlgorithmPreset(
        advantage_fn="none", policy_loss_fn="sft", kl_loss_fn="none", entropy_loss_fn="none", train_only=True
    ),
    "multi_step_grpo": AlgorithmPreset(
        advantage_fn="multi_step_grpo", policy_loss_fn="ppo", group_based=True
    ),
    "dpo": AlgorithmPreset(
        advantage_fn="none",
        policy_loss_fn="dpo",
        kl_loss_fn="none",
        entropy_loss_fn="none",
        train_only=True,
        fixed_repeat_times=2,
    ),
}
