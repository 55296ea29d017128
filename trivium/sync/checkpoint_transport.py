"""The ``checkpoint`` weight transport: each version is a file under the run directory.

The trainer writes ``sync/weights_v<N>.safetensors`` (a sharded trainer writes one file per
gathered bucket into ``sync/weights_v<N>/``, so rank 0 never holds the whole model) and
hands over the path; the explorer's side reads it into every engine. A version's files are
removed once a newer version is published.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from trivium.sync.transport import TRANSPORTS, WeightProvider, WeightSender, WeightTransport
from trivium.sync.weight_update import WeightUpdate


def sync_weights_dir(run_dir: Path, version: int) -> Path:
    """Where a trainer that writes its weights bucket by bucket puts ``version`` for the checkpoint transport."""
    return Path(run_dir) / "sync" / f"weights_v{version}"


class CheckpointSender(WeightSender):
    def __init__(self, run_dir: Path | None):
        if run_dir is None:
            raise ValueError("checkpoint sync needs a run directory")
        self.run_dir = run_dir

    def stage_weights(self, version: int, weights: dict[str, torch.Tensor], *, copy: bool) -> WeightUpdate:
        """Write ``weights`` to a file (a copy by nature, whatever ``copy`` says)."""
        directory = self.run_dir / "sync"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"weights_v{version}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file({name: tensor.contiguous() for name, tensor in _dedup(weights).items()}, str(tmp))
        tmp.rename(path)
        return WeightUpdate(version=version, path=str(path))

    def stage(self, trainer: WeightProvider, version: int, *, copy: bool) -> WeightUpdate:
        if not trainer.parallel.sharded:
            return super().stage(trainer, version, copy=copy)
        # Gathered and written bucket by bucket: rank 0 never holds the whole model.
        directory = sync_weights_dir(self.run_dir, version)
        written = trainer.write_sync_weights(str(directory))
        return WeightUpdate(version=version, path=str(directory), metrics=written)


@TRANSPORTS.register("checkpoint")
class CheckpointTransport(WeightTransport):
    name = "checkpoint"

    def sender(self) -> WeightSender:
        return CheckpointSender(self.run_dir)

    def retire(self, update: WeightUpdate, *, newer: WeightUpdate) -> None:
        if update.path is None or update.path == newer.path:
            return
        if Path(update.path).is_dir():
            shutil.rmtree(update.path, ignore_errors=True)
        else:
            Path(update.path).unlink(missing_ok=True)


def _dedup(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage (tied embeddings): store each tensor once by clone."""
    seen: dict[int, str] = {}
    out = {}
    for name, tensor in weights.items():
        key = tensor.data_ptr()
        out[name] = tensor.clone() if key in seen else tensor
        seen.setdefault(key, name)
    return out
