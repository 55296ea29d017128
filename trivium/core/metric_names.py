"""The names of the metrics that summaries and plots look for, shared by the components
that log them (trainer, explorer, runtime) and the monitor and Studio that read them.

The explorer and the trainer may log any key they like; the keys below are the ones the
summary, the plots and the console headline understand. ``docs/observability.md`` lists
them for whoever emits metrics. A ``*`` in a pattern matches any run of characters
(``fnmatch`` rules), so ``eval/*/accuracy`` covers ``eval/gsm8k/accuracy``.
"""

from __future__ import annotations

EXPLORER = "explorer"
TRAINER = "trainer"
ROLES = (EXPLORER, TRAINER)

# Explorer: one value per explore step.
REWARD_MEAN = "rollout/reward_mean"
RESPONSE_LENGTH_MEAN = "rollout/response_length_mean"
EVAL_ACCURACY = "eval/*/accuracy"  # one key per eval taskset: eval/<taskset>/accuracy

# Trainer: one value per train step.
POLICY_LOSS = "actor/pg_loss"
KL_LOSS = "actor/kl_loss"
ENTROPY = "actor/entropy"
# Optimizer steps of a train step left out because the gradients were not finite (the step
# then trained nothing; the run shows an error naming the step and its samples).
UPDATE_SKIPPED = "actor/update_skipped"
CRITIC_UPDATE_SKIPPED = "critic/update_skipped"

# Seconds a side waited on the other before a step (explorer: for weights or for the trainer
# to catch up; trainer: for experiences).
IDLE_EXPLORER = "time/idle_explorer"
IDLE_TRAINER = "time/idle_trainer"
# Seconds from the process's start to its first step (logged once per process).
STARTUP = "time/startup"

# Either role.
OFF_POLICY_CAPPED = "decoupled/capped_frac"  # share of tokens whose pi_prox / pi_engine weight was capped
OFF_POLICY_MASKED = "decoupled/masked_frac"  # share of tokens masked for a weight outside the kept range
SAMPLING_MASK_KEPT = "sampling_mask/mean_kept"  # mean size of the replayed sampling masks
SAMPLING_MASK_CAPPED = "sampling_mask/capped_share"  # share of truncated tokens whose mask exceeded the cap
STALENESS_MEAN = "staleness/mean"  # trainer step minus the model version that produced the data
STALENESS_MAX = "staleness/max"
THROUGHPUT = "time/throughput_*"
TOKENS_PER_SECOND = "time/throughput_tokens_per_s"
EXPERIENCES_PER_SECOND = "time/throughput_experiences_per_s"

# The console shows these first when present (an exact key or a pattern), then a few others.
HEADLINE_KEYS = (
    REWARD_MEAN,
    EVAL_ACCURACY,
    POLICY_LOSS,
    KL_LOSS,
    ENTROPY,
    RESPONSE_LENGTH_MEAN,
    STALENESS_MEAN,
    TOKENS_PER_SECOND,
)


def eval_taskset_of(key: str) -> str | None:
    """``eval/gsm8k/accuracy`` -> ``gsm8k``; ``None`` for any other key."""
    parts = key.split("/")
    if len(parts) >= 3 and parts[0] == "eval" and parts[-1] == "accuracy":
        return "/".join(parts[1:-1])
    return None
