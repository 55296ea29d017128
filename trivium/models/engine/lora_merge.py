"""Serving a LoRA adapter by merging it into a plain model's linear layers.

``AdapterMerger`` keeps, for each adapted layer, the weight it had before the first adapter
arrived (the base) and sets ``W = W_base + B @ A`` from every adapter update (the form of
``trivium.models.lora_delta``). Merging from the kept base, not from the last merged weight,
means no rounding error piles up over many syncs. A layer sent whole later becomes the new
base. The model keeps its plain architecture, so engines' fast decoders work unchanged.
"""

from __future__ import annotations

import torch


class AdapterMerger:
    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.base: dict[str, torch.Tensor] = {}  # module name -> its weight before any adapter
        # Halves of an adapter that arrived without their partner (a bucketed broadcast may split them).
        self._pending_a: dict[str, torch.Tensor] = {}
        self._pending_b: dict[str, torch.Tensor] = {}

    def merged(self) -> bool:
        """Some layer holds a merged adapter."""
        return bool(self.base)

    def forget(self, weight_names: list[str]) -> None:
        """Layers whose weight was just sent whole: that weight is their new base."""
        for name in weight_names:
            self.base.pop(name.removesuffix(".weight"), None)

    def check(self, lora_a: dict[str, torch.Tensor], lora_b: dict[str, torch.Tensor]) -> None:
        """Refuse an update whose layers or shapes do not fit the model, before anything changes."""
        modules = dict(self.model.named_modules())
        for module_name in {*lora_a, *lora_b}:
            layer = modules.get(module_name)
            weight = getattr(layer, "weight", None)
            if weight is None or weight.dim() != 2:
                raise ValueError(
                    f"update_weights got a LoRA adapter for {module_name!r}, which is not a linear layer of this model"
                )
            out_features, in_features = weight.shape
            a, b = lora_a.get(module_name), lora_b.get(module_name)
            if a is not None and (a.dim() != 2 or a.shape[1] != in_features):
                raise ValueError(f"LoRA A of {module_name} has shape {tuple(a.shape)}; expected (rank, {in_features})")
            if b is not None and (b.dim() != 2 or b.shape[0] != out_features):
                raise ValueError(f"LoRA B of {module_name} has shape {tuple(b.shape)}; expected ({out_features}, rank)")
            if a is not None and b is not None and a.shape[0] != b.shape[1]:
                raise ValueError(f"LoRA A and B of {module_name} have ranks {a.shape[0]} and {b.shape[1]}")

    @torch.no_grad()
    def apply(self, lora_a: dict[str, torch.Tensor], lora_b: dict[str, torch.Tensor]) -> int:
        """Merge every complete (A, B) pair into its layer; returns the number of layers set."""
        self._pending_a.update(lora_a)
        self._pending_b.update(lora_b)
        modules = dict(self.model.named_modules())
        ready = [name for name in self._pending_a if name in self._pending_b]
        for module_name in ready:
            a, b = self._pending_a.pop(module_name), self._pending_b.pop(module_name)
            weight = modules[module_name].weight
            base = self.base.setdefault(module_name, weight.detach().clone())
            # W = W_base + (alpha / r) * B @ A, with the scaling already in B; summed in float32
            merged = base.float() + b.to(device=weight.device, dtype=torch.float32) @ a.to(
                device=weight.device, dtype=torch.float32
            )
            weight.copy_(merged.to(weight.dtype))
        return len(ready)
