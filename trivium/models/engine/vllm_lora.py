"""A LoRA adapter update as vLLM loads it: a directory in peft's format.

The ``vllm`` engine serves the trained adapter as a vLLM LoRA adapter (``enable_lora``): each
sync brings the adapter alone (``trivium.models.lora_delta``: ``<module>.lora_A`` and
``<module>.lora_B_scaled`` per adapted layer), which this module writes as ``adapter_config.json``
+ ``adapter_model.safetensors``, the form vLLM's ``LoRARequest`` points to. B already carries
the scaling (``lora_alpha / rank``), so the written config says ``lora_alpha = r``: vLLM's
scaling is then 1 and it serves ``W_base + B_scaled @ A``, exactly the trainer's weights.

Owns the checks of an adapter update (complete A/B pairs, one rank) and the writing. It is
imported inside vLLM's worker processes too (the Ray placement's broadcast receives the
adapter there), so it uses only torch, safetensors and the update's names.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from trivium.models.lora_delta import A_SUFFIX, ADAPTER_CONFIG, ADAPTER_WEIGHTS, B_SUFFIX, PEFT_PREFIX


def is_adapter_tensor(name: str) -> bool:
    """Whether ``name`` is one half of an adapter in the update form (not a whole weight)."""
    return name.endswith((A_SUFFIX, B_SUFFIX))


def adapter_rank(lora_a: dict[str, torch.Tensor], lora_b: dict[str, torch.Tensor]) -> int:
    """The adapter's one rank; refuses halves without their partner and mixed ranks."""
    if set(lora_a) != set(lora_b):
        missing = sorted(set(lora_a) ^ set(lora_b))
        raise ValueError(
            f"a LoRA adapter update must hold A and B of every adapted layer; unpaired: {missing[:3]}"
        )
    if not lora_a:
        raise ValueError("the LoRA adapter update holds no adapted layer")
    ranks = {int(a.shape[0]) for a in lora_a.values()} | {int(b.shape[1]) for b in lora_b.values()}
    if len(ranks) != 1:
        raise ValueError(
            f"the LoRA adapter update mixes ranks {sorted(ranks)}; vLLM serves one rank per adapter"
        )
    return ranks.pop()


def write_adapter_dir(
    lora_a: dict[str, torch.Tensor], lora_b: dict[str, torch.Tensor], folder: str | Path, *, base_model: str
) -> int:
    """Write the adapter (by module name, B scaled) in peft's format into ``folder``; returns its rank."""
    rank = adapter_rank(lora_a, lora_b)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module in sorted(lora_a):
        tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = (
            lora_a[module].detach().to("cpu", copy=True).contiguous()
        )
        tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = (
            lora_b[module].detach().to("cpu", copy=True).contiguous()
        )
    save_file(tensors, str(folder / ADAPTER_WEIGHTS))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        # B is sent already scaled: alpha = r makes vLLM's scaling (alpha / r) exactly 1.
        "lora_alpha": rank,
        "target_modules": sorted({module.rsplit(".", 1)[-1] for module in lora_a}),
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=1), encoding="utf-8")
    return rank
