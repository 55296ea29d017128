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
    # One line for `trivium algorithms`, and the paper (or system) it comes from.
    summary: str = ""
    reference: str = ""
    # Needs several samples per task (the group) to compute advantages.
    group_based: bool = False
    # The fewest samples per task a group-based preset works with.
    min_repeat_times: int = 2
    use_critic: bool = False
    # Trains from a dataset, so only train mode makes sense.
    train_only: bool = False
    # Trains on raw text rows (format.prompt_type: raw), not on chat-formatted ones.
    reads_raw_text: bool = False
    # Forced repeat_times (dpo reads pairs).
    fixed_repeat_times: int | None = None
    # The explorer also samples one greedy response per task; its reward is the baseline.
    needs_greedy_baseline: bool = False
    # The explorer scores every sampled response with a teacher (an auxiliary model).
    needs_teacher_logprobs: bool = False
    # Every batch mixes in rows of an expert dataset (an auxiliary buffer).
    needs_expert_data: bool = False
    # The loss compares the rollout policy with the current one: the old logprobs must be the
    # rollout engine's (algorithm.bypass_old_logprobs: true), never recomputed by the trainer.
    needs_rollout_logprobs: bool = False
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)

    @property
    def learns_from_rollouts(self) -> bool:
        """False for presets trained on a dataset (sft, dpo): no staleness, no reward metrics."""
        return not self.train_only


PRESETS: dict[str, AlgorithmPreset] = {
    "ppo": AlgorithmPreset(
        advantage_fn="ppo", policy_loss_fn="ppo", use_critic=True,
        summary="clipped-ratio policy gradient with a learned critic and GAE",
        reference="Schulman et al., 2017, arXiv:1707.06347",
    ),
    "grpo": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="ppo", group_based=True,
        summary="PPO loss with group-normalised outcome advantages, no critic",
        reference="Shao et al., 2024 (DeepSeekMath), arXiv:2402.03300",
    ),
    "grpo_verl": AlgorithmPreset(
        advantage_fn="grpo_verl", policy_loss_fn="ppo", group_based=True,
        summary="GRPO with advantages computed in the trainer after the KL penalty, as veRL does",
        reference="veRL compute_grpo_outcome_advantage",
    ),
    "opmd": AlgorithmPreset(
        advantage_fn="opmd", policy_loss_fn="opmd", group_based=True,
        summary="online policy mirror descent: group-baseline REINFORCE scaled by 1 / (1 + tau)",
        reference="Trinity-RFT, arXiv:2505.17826",
    ),
    "rloo": AlgorithmPreset(
        advantage_fn="rloo", policy_loss_fn="ppo", group_based=True,
        summary="PPO loss with a leave-one-out group baseline",
        reference="Ahmadian et al., 2024, arXiv:2402.14740",
    ),
    "reinforceplusplus": AlgorithmPreset(
        advantage_fn="reinforceplusplus", policy_loss_fn="ppo",
        summary="PPO loss with batch-whitened discounted returns, no critic",
        reference="Hu, 2025 (REINFORCE++), arXiv:2501.03262",
    ),
    "remax": AlgorithmPreset(
        advantage_fn="remax", policy_loss_fn="ppo", needs_greedy_baseline=True,
        summary="REINFORCE with the reward of a greedy response to the same task as baseline",
        reference="Li et al., 2023 (ReMax), arXiv:2310.10505",
    ),
    "gspo": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="gspo", group_based=True,
        summary="GRPO advantages with a clipped sequence-level importance ratio",
        reference="Zheng et al., 2025, arXiv:2507.18071",
    ),
    "cispo": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="cispo", group_based=True,
        summary="REINFORCE weighted by a clipped, stop-gradient importance ratio",
        reference="MiniMax-M1, 2025, arXiv:2506.13585",
    ),
    "asymre": AlgorithmPreset(
        advantage_fn="asymre", policy_loss_fn="opmd", group_based=True, kl_loss_fn="none", entropy_loss_fn="none",
        summary="asymmetric REINFORCE: group mean shifted down as baseline",
        reference="Arnal et al., 2025, arXiv:2506.20520",
    ),
    "topr": AlgorithmPreset(
        advantage_fn="reinforce", policy_loss_fn="topr", group_based=True,
        summary="tapered off-policy REINFORCE: truncated ratio on negative samples only",
        reference="Le Roux et al., 2025, arXiv:2503.14286",
    ),
    "sapo": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="sapo", group_based=True,
        summary="GRPO advantages with a smooth sigmoid gate on the ratio instead of a hard clip",
        reference="Gao et al., 2025 (SAPO), arXiv:2511.20347",
    ),
    "rec": AlgorithmPreset(
        advantage_fn="rec", policy_loss_fn="rec", group_based=True,
        summary="group-relative REINFORCE with selectable clipping, weighting and regulariser",
        reference="Yao et al., 2025, arXiv:2509.24203",
    ),
    "sppo": AlgorithmPreset(
        advantage_fn="opmd", policy_loss_fn="sppo", group_based=True, kl_loss_fn="none", entropy_loss_fn="none",
        summary="log-ratio surrogate clipped symmetrically in log space",
        reference="Vaswani et al., 2021, arXiv:2108.05828",
    ),
    "raft": AlgorithmPreset(
        advantage_fn="none", policy_loss_fn="sft", kl_loss_fn="none", entropy_loss_fn="none",
        summary="reward-ranked fine-tuning: SFT on the rollouts the workflow keeps (it filters by reward)",
        reference="Dong et al., 2023 (RAFT), arXiv:2304.06767",
    ),
    "mix": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="mix", group_based=True, sample_strategy="mix",
        entropy_loss_fn="mix", needs_expert_data=True,
        summary="GRPO on rollouts plus a fixed share of SFT on expert rows",
        reference="Trinity-RFT, arXiv:2505.17826",
    ),
    "mix_chord": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="mix_chord", group_based=True, sample_strategy="mix",
        entropy_loss_fn="mix", needs_expert_data=True,
        summary="GRPO on rollouts plus scheduled, phi-weighted SFT on expert rows (CHORD)",
        reference="Zhang et al., 2025 (CHORD), arXiv:2508.11408",
    ),
    "on_policy_distill": AlgorithmPreset(
        advantage_fn="on_policy_distill", policy_loss_fn="ppo", kl_loss_fn="none", entropy_loss_fn="none",
        needs_teacher_logprobs=True,
        summary="on-policy distillation: per-token advantage = teacher minus student logprob",
        reference="Agarwal et al., 2024 (GKD), arXiv:2306.13649; Thinking Machines, 2025",
    ),
    "jsd": AlgorithmPreset(
        advantage_fn="jsd", policy_loss_fn="ppo", kl_loss_fn="none", entropy_loss_fn="none",
        needs_teacher_logprobs=True,
        summary="on-policy distillation with a per-token Jensen-Shannon advantage",
        reference="Agarwal et al., 2024 (GKD), arXiv:2306.13649",
    ),
    "dapo": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="ppo", group_based=True, kl_loss_fn="none",
        advantage_fn_args={"std_threshold": 0.0},
        policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.28},
        summary="GRPO with clip-higher, token-mean loss and dynamic sampling (flat groups leave the batch)",
        reference="Yu et al., 2025 (DAPO), arXiv:2503.14476",
    ),
    "gigpo": AlgorithmPreset(
        advantage_fn="gigpo", policy_loss_fn="ppo", group_based=True,
        summary="multi-step agents: episode-level GRPO plus step-level groups of equal anchor states",
        reference="Feng et al., 2025 (GiGPO), arXiv:2505.10978",
    ),
    "m2po": AlgorithmPreset(
        advantage_fn="grpo", policy_loss_fn="m2po", group_based=True, needs_rollout_logprobs=True,
        summary="GRPO advantages; tokens with the largest squared log-ratio leave the loss until its mean is bounded",
        reference="M2PO (Second-Moment Trust Policy Optimization), openreview.net/forum?id=IIgl5MWelz",
    ),
    "cpt": AlgorithmPreset(
        advantage_fn="none", policy_loss_fn="sft", kl_loss_fn="none", entropy_loss_fn="none", train_only=True,
        reads_raw_text=True,
        summary="continued pre-training: next-token loss on every token of raw text rows (format.prompt_type: raw)",
    ),
    "sft": AlgorithmPreset(
        advantage_fn="none", policy_loss_fn="sft", kl_loss_fn="none", entropy_loss_fn="none", train_only=True,
        summary="supervised fine-tuning on a dataset",
    ),
    "multi_step_grpo": AlgorithmPreset(
        advantage_fn="multi_step_grpo", policy_loss_fn="ppo", group_based=True,
        summary="GRPO over whole multi-turn episodes: one group advantage on every model turn",
        reference="Shao et al., 2024 (DeepSeekMath), arXiv:2402.03300, applied per episode",
    ),
    "dpo": AlgorithmPreset(
        advantage_fn="none",
        policy_loss_fn="dpo",
        train_only=True,
        fixed_repeat_times=2,
        summary="direct preference optimisation on (chosen, rejected) pairs",
        reference="Rafailov et al., 2023, arXiv:2305.18290",
    ),
}
