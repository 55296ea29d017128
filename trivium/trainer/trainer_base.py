"""What every trainer the runtime builds holds, and the arguments it is built with.

``Trainer`` (PyTorch, in this run's processes) and ``TinkerTrainer`` (on a Tinker service)
take the same arguments from the runtime (``runtime/workers.py``): the settings, the run
directory, the tokenizer, its padding id and the log. A trainer that starts ranks of its own
also takes where to start them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trivium.trainer.settings import TrainerSettings


class TrainerBase:
    def __init__(
        self,
        settings: TrainerSettings,
        *,
        run_dir: str | Path,
        tokenizer: Any = None,
        pad_token_id: int = 0,
        logger: logging.Logger | None = None,
    ):
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.tokenizer = tokenizer
        self.pad_token_id = pad_token_id
        self.logger = logger or logging.getLogger("trivium.trainer")
        self.global_step = 0

    def raise_if_ranks_lost(self) -> None:
        """Raise ``ComponentDied`` when a rank of this trainer was lost since its last step; a
        trainer without ranks of its own has none to lose."""
