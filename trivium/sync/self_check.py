"""A check that catches silent weight-sync failures.

After a sync, the trainer scores a few sequences the engine has just sampled, with the
weights it sent (``trivium.trainer.forward.trainer_logprobs``, handed in as scores), and the
engine scores them with the weights it loaded. If the weights
arrived intact, both logprobs agree up to numerical noise (float32 on CPU: ~1e-5). A large
gap means the engine is not serving what the trainer sent.

The engine's side goes through its sampling path when it can (``replays_samples``): it
samples the probes' responses again, each token forced, and reports the logprobs its
sampler gives them, exactly as a rollout records them. Other engines score the probes with
``compute_logprobs``. ``sync/check_through_sampling`` (1 or 0) says which was compared.
"""

from __future__ import annotations

import logging

import torch

from trivium.core.experience import Experience

DEFAULT_THRESHOLD = 0.05


def replays_samples(engine) -> bool:
    """The engine's trait; a plugin engine that does not declare it scores with compute_logprobs."""
    return bool(getattr(engine, "replays_samples", False))


def engine_logprobs(engine, probes: list[Experience]) -> list[torch.Tensor]:
    """The engine's logprobs of the probes' responses: from its sampler when it replays samples."""
    sequences, prompt_lengths = [e.tokens.tolist() for e in probes], [e.prompt_length for e in probes]
    if replays_samples(engine):
        return engine.replay_logprobs(sequences, prompt_lengths)
    return engine.compute_logprobs(sequences, prompt_lengths)


def max_logprob_gap(reference: list[torch.Tensor], other: list[torch.Tensor]) -> float:
    gaps = [float((a.float() - b.float()).abs().max()) for a, b in zip(reference, other) if a.numel()]
    return max(gaps, default=0.0)


def check_sync(
    trainer_scores: list[torch.Tensor],
    engine,
    probes: list[Experience],
    *,
    version: int,
    threshold: float = DEFAULT_THRESHOLD,
    logger: logging.Logger | None = None,
) -> dict[str, float]:
    gap = max_logprob_gap(trainer_scores, engine_logprobs(engine, probes))
    if gap > threshold:
        (logger or logging.getLogger("trivium.sync")).warning(
            "WEIGHT SYNC CHECK FAILED at version %d: engine and trainer logprobs differ by %.4f (> %.4f). "
            "The engine may not be serving the trainer's weights.",
            version,
            gap,
            threshold,
        )
    return {
        "sync/max_logprob_diff": gap,
        "sync/version": float(version),
        "sync/check_through_sampling": float(replays_samples(engine)),
    }
