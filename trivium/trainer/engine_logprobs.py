"""The rollout engine's logprobs as the policy loss's old logprobs.

With ``trainer.old_logprobs_source: engine`` (``algorithm.bypass_old_logprobs: true``) the
trainer computes no old logprobs: the ones the engine reported when it sampled each response,
stored with the experience, are the behaviour policy's. This module owns the check that
every experience the policy loss trains on carries them, one per response token; a batch
with one that does not (a dataset row, an engine or API that returned none) stops with an
error naming the setting instead of training against the zeros its place holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.errors import UserError

if TYPE_CHECKING:
    import torch

    from trivium.core.batch import ExperienceBatch
    from trivium.core.experience import Experience


def has_engine_logprobs(experience: Experience) -> bool:
    """True if the experience carries one engine logprob per response token."""
    logprobs = experience.logprobs
    return logprobs is not None and logprobs.numel() == experience.response_length


def reads_engine_logprobs(experience: Experience) -> bool:
    """True if the policy loss reads this row's old logprobs: a rollout (not an expert row of a
    mixed batch, which is trained by the SFT part) with at least one trained token."""
    mask = experience.action_mask
    return not experience.is_expert and (mask is None or bool(mask.any()))


def engine_old_logprobs(batch: ExperienceBatch, experiences: list[Experience]) -> torch.Tensor:
    """(B, R) old logprobs of ``batch`` (built from ``experiences``, in order): the engine's.

    Raises UserError if a row the policy loss reads has none.
    """
    missing = [e for e in experiences if reads_engine_logprobs(e) and not has_engine_logprobs(e)]
    if missing:
        raise UserError(
            f"trainer.old_logprobs_source 'engine' (algorithm.bypass_old_logprobs: true) takes the old logprobs "
            f"from the rollout engine, but {len(missing)} of the {len(experiences)} experiences of this batch carry "
            f"none for their response tokens (e.g. experience {missing[0].eid}): they come from a dataset, or from an "
            "engine or API that returned no logprobs. Set algorithm.bypass_old_logprobs: false (or remove it) so "
            "that the trainer computes them."
        )
    return batch.old_logprobs
