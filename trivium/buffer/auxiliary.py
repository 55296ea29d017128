"""Auxiliary buffers of the trainer (``trainer_input.auxiliary_buffers``), e.g. SFT data for ``mix``.

Owns reading a dataset (file or SQL storage) as training Experiences: rows come from a
``TaskReader`` that cycles epochs forever (in the storage's ``task_selector`` order) and
are turned into Experiences by the SFT or DPO formatter. ``read(batch_size)`` takes
``batch_size`` rows: that many SFT experiences, or ``2 * batch_size`` for DPO pairs.

A row is formatted (chat template, tokenizer) the first time it is read; later epochs reuse
its tokens, up to ``FORMATTED_TOKEN_BUDGET`` tokens kept. On a small model, rendering and
tokenizing a batch costs as much as a sixth of an SFT step.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from trivium.buffer.base import BufferReader, Restored, check_batch_size
from trivium.buffer.formatters import DPOFormatter, SFTFormatter
from trivium.buffer.task_reader import TaskReader
from trivium.core.experience import Experience, new_experience_id
from trivium.errors import UserError

logger = logging.getLogger(__name__)

# Formatted rows kept for later epochs, in tokens (about 9 bytes each: token id and flag).
FORMATTED_TOKEN_BUDGET = 16_000_000


class AuxiliaryBufferReader(BufferReader):
    def __init__(self, config: Any, *, tokenizer: Any, kind: str | None = None,
                 default_seed: int | None = None, strict: bool = False, **_: Any):
        self.name = config.name
        self.rows = TaskReader(config, total_epochs=None, strict=strict, default_seed=default_seed)
        fmt = self.rows.format
        columns = getattr(self.rows.rows, "column_names", None) or list(self.rows.rows[0])
        if kind is None:
            has_pairs = fmt.get("chosen_key") in columns and fmt.get("rejected_key") in columns
            kind = "dpo" if has_pairs else "sft"
        if kind not in ("sft", "dpo"):
            raise UserError(f"Auxiliary buffer '{self.name}': kind must be 'sft' or 'dpo', got {kind!r}")
        self.kind = kind
        self.formatter = (DPOFormatter if kind == "dpo" else SFTFormatter)(tokenizer, fmt)
        self._formatted: dict[int, list[Experience]] = {}
        self._formatted_tokens = 0

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        check_batch_size(batch_size)
        experiences: list[Experience] = []
        for task in self.rows.read(batch_size):
            formatted = self._formatted.get(task.index)
            if formatted is None:
                formatted = self._format(task)
            experiences.extend(_fresh_copy(experience) for experience in formatted)
        return experiences

    def _format(self, task: Any) -> list[Experience]:
        """The row's experiences, kept for later epochs while the budget allows."""
        try:
            if self.kind == "dpo":
                formatted = self.formatter.format_pair(task.raw, group_id=task.task_id)
            else:
                experience = self.formatter.format(task.raw)
                experience.task_id = experience.group_id = task.task_id
                formatted = [experience]
        except UserError as error:
            raise UserError(f"Auxiliary buffer '{self.name}' {self.rows.place(task.index)}: {error}") from error
        tokens = sum(len(experience.tokens) for experience in formatted)
        if self._formatted_tokens + tokens <= FORMATTED_TOKEN_BUDGET:
            self._formatted[task.index] = formatted
            self._formatted_tokens += tokens
        return formatted

    @property
    def epoch(self) -> int:
        return self.rows.epoch

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        return self.rows.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        self.rows.load_state_dict(state)
        return Restored()


def _fresh_copy(experience: Experience) -> Experience:
    """A new experience (its own id) that shares nothing mutable with the kept one: the
    trainer annotates experiences."""
    return dataclasses.replace(
        experience,
        eid=new_experience_id(),
        tokens=experience.tokens.clone(),
        action_mask=experience.action_mask.clone(),
        info=dict(experience.info),
        metrics=dict(experience.metrics),
    )
