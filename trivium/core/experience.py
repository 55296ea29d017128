"""Experience: one sampled sequence with everything the trainer needs.

Owns the record type that flows explorer -> buffer -> trainer. It knows nothing about
storage, tokenizers or models.

Token-in, token-out: ``tokens`` are the exact ids the engine produced (prompt followed by
response); ``logprobs`` are the engine's own per-token logprobs of the response tokens.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trivium.core.array_pickling import arrays_to_tensors, tensors_to_arrays
from trivium.core.sampling_mask import SamplingMask
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


_TENSOR_FIELDS = ("tokens", "logprobs", "action_mask", "advantages", "returns", "teacher_logprobs")


def new_experience_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Experience:
    """One prompt + response.

    Shapes (1-D):
      tokens:      (prompt_length + response_length,) int64
      logprobs:    (response_length,) float32, engine logprobs of the sampled response tokens
      action_mask: (response_length,) bool, True where the token is trained on (model-generated)
      advantages / returns: (response_length,) float32 when filled by the pipeline
      teacher_logprobs: (response_length,) float32, a teacher model's logprobs of the same
                   response tokens (distillation), filled by the explorer
      sampling_mask: the token set the engine's top-k/top-p truncation kept at each response
                   token (``core/sampling_mask.py``), only with ``trainer.replay_sampling_mask``
    """

    tokens: torch.Tensor
    prompt_length: int
    logprobs: torch.Tensor | None = None
    action_mask: torch.Tensor | None = None
    reward: float | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None
    # The reward of a greedy response to the same task (the remax baseline).
    baseline_reward: float | None = None
    # A row of an expert dataset mixed into an RL batch (mix, mix_chord).
    is_expert: bool = False
    # Identity and grouping: experiences with the same group_id were sampled from one task.
    eid: str = field(default_factory=new_experience_id)
    group_id: str = ""
    # Steps of one multi-turn episode share an episode_id ("" : the experience is a whole episode).
    episode_id: str = ""
    task_id: str = ""
    run_id: int = 0
    model_version: int = 0
    # The explorer step that sampled it (0: not from an explorer step, e.g. a dataset row).
    explore_step: int = 0
    # A prompt that was cut to max_prompt_tokens is kept for metrics but not trained on.
    prompt_truncated: bool = False
    # A multi-turn episode that reached max_model_len and ended there; trained on or not per
    # the trainer's ``truncation`` setting.
    episode_truncated: bool = False
    prompt_text: str | None = None
    response_text: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    sampling_mask: SamplingMask | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, torch.Tensor):
            self.tokens = torch.as_tensor(self.tokens, dtype=torch.long)
        if self.logprobs is not None and not isinstance(self.logprobs, torch.Tensor):
            self.logprobs = torch.as_tensor(self.logprobs, dtype=torch.float32)
        if not 0 <= self.prompt_length <= self.tokens.numel():
            raise ValueError(
                f"Experience: prompt_length {self.prompt_length} is outside 0..{self.tokens.numel()} "
                "(the number of tokens, prompt and response together)"
            )
        if self.action_mask is None:
            self.action_mask = torch.ones(self.response_length, dtype=torch.bool)
        elif not isinstance(self.action_mask, torch.Tensor):
            self.action_mask = torch.as_tensor(self.action_mask, dtype=torch.bool)
        for name in ("advantages", "returns", "teacher_logprobs"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, torch.Tensor):
                setattr(self, name, torch.as_tensor(value, dtype=torch.float32))
        if isinstance(self.sampling_mask, dict):
            self.sampling_mask = SamplingMask.from_dict(self.sampling_mask)
        if self.sampling_mask is not None and self.sampling_mask.length != self.response_length:
            raise ValueError(
                f"Experience: sampling_mask covers {self.sampling_mask.length} tokens, "
                f"the response has {self.response_length}"
            )

    # Pickled with numpy arrays for tensors: much faster across processes (core/array_pickling.py).
    def __getstate__(self) -> dict[str, Any]:
        return tensors_to_arrays(self.__dict__, _TENSOR_FIELDS)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(arrays_to_tensors(state, _TENSOR_FIELDS))

    @property
    def response_length(self) -> int:
        return int(self.tokens.numel()) - self.prompt_length

    @property
    def prompt_tokens(self) -> torch.Tensor:
        return self.tokens[: self.prompt_length]

    @property
    def response_tokens(self) -> torch.Tensor:
        return self.tokens[self.prompt_length :]

    def to_dict(self) -> dict[str, Any]:
        """Plain-python form (lists, not tensors) for JSON and SQL storage."""

        def listed(value: torch.Tensor | None) -> list | None:
            return None if value is None else value.tolist()

        return {
            "eid": self.eid,
            "group_id": self.group_id,
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "model_version": self.model_version,
            "explore_step": self.explore_step,
            "tokens": listed(self.tokens),
            "prompt_length": self.prompt_length,
            "logprobs": listed(self.logprobs),
            "action_mask": listed(self.action_mask),
            "reward": self.reward,
            "advantages": listed(self.advantages),
            "returns": listed(self.returns),
            "teacher_logprobs": listed(self.teacher_logprobs),
            "baseline_reward": self.baseline_reward,
            "is_expert": self.is_expert,
            "prompt_truncated": self.prompt_truncated,
            "episode_truncated": self.episode_truncated,
            "prompt_text": self.prompt_text,
            "response_text": self.response_text,
            "info": self.info,
            "metrics": self.metrics,
            "sampling_mask": None if self.sampling_mask is None else self.sampling_mask.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Experience:
        return cls(**data)


def episode_index(experiences: list[Experience]) -> list[int]:
    """Each experience's episode as a small integer: shared episode_id, or its own row."""
    labels = [e.episode_id or f"row:{e.eid}" for e in experiences]
    index = {label: i for i, label in enumerate(dict.fromkeys(labels))}
    return [index[label] for label in labels]
