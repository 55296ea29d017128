"""``WeightUpdate``: one weight version on its way from the trainer to the rollout engines.

Whatever the transport, an update carries its version, the probes of the sync self-check,
and what staging it measured; the transport fills the one field it hands the weights over in
(tensors, a file or directory, the layout of a broadcast, or a training service's path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file


@dataclass
class WeightUpdate:
    version: int
    weights: dict[str, torch.Tensor] | None = None  # memory transport
    path: str | None = None  # checkpoint transport
    # Sequences the engine sampled, with the trainer's logprobs of them under this version.
    probes: list | None = None
    probe_scores: list[torch.Tensor] | None = None
    # collective transport: (name, shape, dtype) of each tensor the trainer will broadcast
    spec: list[tuple[str, tuple[int, ...], str]] | None = None
    # What staging the update measured on the trainer's side (e.g. sync/buckets), logged when it loads
    metrics: dict[str, float] = field(default_factory=dict)
    # service transport (Tinker): where the service saved the weights for its sampler (tinker://...)
    sampler_path: str | None = None

    def load(self) -> dict[str, torch.Tensor]:
        if self.sampler_path is not None:
            raise ValueError(
                f"weight version {self.version} lives on the training service ({self.sampler_path})"
            )
        if self.weights is not None:
            return self.weights
        if Path(self.path).is_dir():  # written bucket by bucket (see sync_weights_dir)
            weights: dict[str, torch.Tensor] = {}
            for part in sorted(Path(self.path).glob("bucket_*.safetensors")):
                weights.update(load_file(part))
            return weights
        return load_file(self.path)
