"""The ``memory`` weight transport: explorer and trainer in one process share the tensors.

The trainer hands over a snapshot (or its own tensors, when it waits for the load to end);
the explorer's side loads them into every engine.
"""

from __future__ import annotations

import torch

from trivium.sync.transport import TRANSPORTS, WeightSender, WeightTransport
from trivium.sync.weight_update import WeightUpdate


class MemorySender(WeightSender):
    def stage_weights(self, version: int, weights: dict[str, torch.Tensor], *, copy: bool) -> WeightUpdate:
        # The trainer keeps updating its tensors in place; hand over a snapshot when it runs on.
        snapshot = {name: tensor.detach().clone() for name, tensor in weights.items()} if copy else weights
        return WeightUpdate(version=version, weights=snapshot)


@TRANSPORTS.register("memory")
class MemoryTransport(WeightTransport):
    name = "memory"
    hands_over_own_tensors = True

    def sender(self) -> WeightSender:
        return MemorySender()
