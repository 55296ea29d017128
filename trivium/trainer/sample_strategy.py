"""Sample strategies: how the trainer draws a batch from its buffers.

``default`` and ``staleness_control`` read the experience buffer as it is (staleness is
applied inside the trainer step). ``mix`` adds rows of an auxiliary SFT buffer, flagged as
expert data, to every batch of on-policy experiences.
"""

from __future__ import annotations

from typing import Any

from trivium.core.experience import Experience


class MixSampler:
    """On-policy experiences plus expert rows; ``expert_data_ratio`` = expert share of the batch."""

    def __init__(self, rl_reader: Any, expert_reader: Any, expert_data_ratio: float = 0.25):
        if not 0.0 <= expert_data_ratio < 1.0:
            raise ValueError(f"expert_data_ratio must be in [0, 1), got {expert_data_ratio}")
        self.rl_reader = rl_reader
        self.expert_reader = expert_reader
        self.ratio = expert_data_ratio

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        on_policy = self.rl_reader.read(batch_size, timeout)
        expert_count = round(len(on_policy) * self.ratio / (1.0 - self.ratio))
        expert = self.expert_reader.read(expert_count) if expert_count else []
        for exp in expert:
            exp.is_expert = True
        return on_policy + expert

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        return {
            "rollouts": self.rl_reader.state_dict(max_explore_step),
            "expert": self.expert_reader.state_dict(max_explore_step),
        }

    def load_state_dict(self, state: dict[str, Any]) -> Any:
        self.expert_reader.load_state_dict(state.get("expert", {}))
        return self.rl_reader.load_state_dict(state.get("rollouts", {}))

    def close(self) -> None:
        for reader in (self.rl_reader, self.expert_reader):
            close = getattr(reader, "close", None)
            if close:
                close()
