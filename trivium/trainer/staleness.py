"""Staleness control: how far behind the trained policy a batch's samples are, and what to do
with samples older than ``staleness_limit`` (drop them, or shrink their advantages)."""

from __future__ import annotations

from trivium.core.experience import Experience


def control_staleness(
    experiences: list[Experience], *, global_step: int, limit: int | None, mode: str
) -> tuple[list[Experience], dict[str, float]]:
    """The experiences to train on, and the staleness metrics of the batch."""
    staleness = [global_step - e.model_version for e in experiences]
    metrics = {
        "staleness/mean": sum(staleness) / max(1, len(staleness)),
        "staleness/max": float(max(staleness, default=0)),
    }
    if limit is None:
        return experiences, metrics
    if mode == "drop":
        kept = [e for e, s in zip(experiences, staleness) if s <= limit]
        metrics["staleness/dropped"] = float(len(experiences) - len(kept))
        return kept, metrics
    for exp, s in zip(experiences, staleness):
        if s > limit and exp.advantages is not None:
            # Older than the bound: shrink its say in the update instead of dropping it.
            exp.advantages = exp.advantages / (1 + s - limit)
    return experiences, metrics
