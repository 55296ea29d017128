"""Auxiliary buffers of the trainer (``trainer_input.auxiliary_buffers``), e.g. SFT data for ``mix``.

Owns reading a dataset (file or SQL storage) as training Experiences: rows come from a
``TaskReader`` that cycles epochs forever (in the storage's ``task_selector`` order) and
are turned into Experiences by the SFT or DPO formatter. ``read(batch_size)`` takes
``batch_size`` rows: that many SFT experiences, or ``2 * batch_size`` for DPO pairs.
"""

from __future__ import annotations

import logging
from typing import Any

from trivium.buffer.base import BufferReader, Restored, check_batch_size
from trivium.buffer.formatters import DPOFormatter, SFTFormatter
from trivium.buffer.task_reader import TaskReader
from trivium.core.experience import Experience
from trivium.errors import UserError

logger = logging.getLogger(__name__)


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

    def read(self, batch_size: int, timeout: float | None = None) -> list[Experience]:
        check_batch_size(batch_size)
        experiences: list[Experience] = []
        for task in self.rows.read(batch_size):
            try:
                if self.kind == "dpo":
                    experiences.extend(self.formatter.format_pair(task.raw, group_id=task.task_id))
                else:
                    experience = self.formatter.format(task.raw)
                    experience.task_id = experience.group_id = task.task_id
                    experiences.append(experience)
            except UserError as error:
                raise UserError(f"Auxiliary buffer '{self.name}' {self.rows.place(task.index)}: {error}") from error
        return experiences

    @property
    def epoch(self) -> int:
        return self.rows.epoch

    def state_dict(self, max_explore_step: int | None = None) -> dict[str, Any]:
        return self.rows.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> Restored:
        self.rows.load_state_dict(state)
        return Restored()
