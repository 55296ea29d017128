"""The sample strategies (``algorithm.sample_strategy``): what each one is, declared once.

A strategy says how the trainer draws a batch from its buffers. Each declares the arguments
it reads with their defaults (``resolve()`` fills them; ``validate()`` refuses others) and its
traits, which the config rules and the runtime ask instead of comparing names:

- ``default``: the experience buffer as it is;
- ``staleness_control``: the same, with experiences older than ``max_staleness`` versions
  dropped or down-weighted inside the trainer step (``controls_staleness``);
- ``mix``: expert rows of an auxiliary dataset added to every batch (``mixes_expert_data``;
  ``trivium/trainer/sample_strategy.py``).

The reference's ``warmup`` is a spelling ``resolve()`` turns into ``default`` with a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SampleStrategy:
    name: str
    defaults: dict[str, Any] = field(default_factory=dict)  # the arguments it reads, with their defaults
    controls_staleness: bool = False
    mixes_expert_data: bool = False


SAMPLE_STRATEGIES: dict[str, SampleStrategy] = {
    strategy.name: strategy
    for strategy in (
        SampleStrategy("default"),
        SampleStrategy("staleness_control", {"max_staleness": 1, "mode": "drop"}, controls_staleness=True),
        SampleStrategy("mix", {"expert_data_ratio": 0.25}, mixes_expert_data=True),
    )
}


def sample_strategy(name: str | None) -> SampleStrategy:
    """The strategy ``name`` (``default`` when unset)."""
    return SAMPLE_STRATEGIES[name or "default"]
