"""The adapter-only form of a weight update: what crosses from the trainer to the engines under LoRA.

For every adapted linear layer ``<module>`` (named as in the plain base model, for example
``model.layers.0.self_attn.q_proj``) an update holds two tensors::

    <module>.lora_A          (rank, in_features)
    <module>.lora_B_scaled   (out_features, rank)   peft's lora_B times the layer's scaling

and the weight to serve is ``W = W_base + lora_B_scaled @ lora_A``. Folding the scaling
(``lora_alpha / rank``) into B makes an update self-contained: the receiver needs no adapter
config. Owns the names, splitting an update into whole weights and adapter pairs, and reading
an adapter saved in peft's format (``adapter_config.json`` + ``adapter_model.safetensors``)
into this form. It knows nothing about training or about a particular engine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from trivium.errors import UserError

A_SUFFIX = ".lora_A"
B_SUFFIX = ".lora_B_scaled"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# peft's prefix in front of the base model's own module names.
PEFT_PREFIX = "base_model.model."


def split_update(
    state_dict: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(whole weights, lora_A by module, lora_B_scaled by module) of an update."""
    whole, lora_a, lora_b = {}, {}, {}
    for name, tensor in state_dict.items():
        if name.endswith(A_SUFFIX):
            lora_a[name[: -len(A_SUFFIX)]] = tensor
        elif name.endswith(B_SUFFIX):
            lora_b[name[: -len(B_SUFFIX)]] = tensor
        else:
            whole[name] = tensor
    return whole, lora_a, lora_b


def delta_key(module: str, half: str) -> str:
    """The update name of one half (``"A"`` or ``"B"``) of ``module``'s adapter."""
    return module + (A_SUFFIX if half == "A" else B_SUFFIX)


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def read_adapter_config(adapter_dir: str | Path) -> dict:
    path = Path(adapter_dir) / ADAPTER_CONFIG
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read the adapter config {path}: {error}") from None


def check_plain_lora(config: dict, where: str) -> None:
    """Only plain LoRA on linear layers folds into ``W + B @ A``; refuse the variants that do not."""
    problems = []
    if config.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type is {config.get('peft_type')!r}, not 'LORA'")
    if config.get("use_dora"):
        problems.append("it is a DoRA adapter (use_dora: true)")
    if config.get("modules_to_save"):
        problems.append(f"it trains whole modules too (modules_to_save: {config['modules_to_save']})")
    if config.get("bias", "none") != "none":
        problems.append(f"it trains biases (bias: {config['bias']!r})")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        problems.append("it sets per-layer ranks or alphas (rank_pattern / alpha_pattern)")
    if problems:
        raise UserError(f"the adapter in {where} cannot be used: {'; '.join(problems)}. Only plain LoRA is supported.")


def lora_scaling(*, rank: int, alpha: float, use_rslora: bool = False) -> float:
    # peft: scaling = alpha / r, or alpha / sqrt(r) with rank-stabilised LoRA
    return alpha / math.sqrt(rank) if use_rslora else alpha / rank


def delta_from_adapter_dir(adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """The update form of an adapter saved by peft (``save_pretrained``) in ``adapter_dir``."""
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    config = read_adapter_config(adapter_dir)
    check_plain_lora(config, str(adapter_dir))
    weights_path = adapter_dir / ADAPTER_WEIGHTS
    if not weights_path.is_file():
        raise UserError(f"{adapter_dir} has {ADAPTER_CONFIG} but no {ADAPTER_WEIGHTS}")
    scaling = lora_scaling(rank=int(config["r"]), alpha=float(config["lora_alpha"]), use_rslora=bool(config.get("use_rslora")))
    update: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(str(weights_path)).items():
        module = name.removeprefix(PEFT_PREFIX)
        if module.endswith(".lora_A.weight"):
            update[delta_key(module[: -len(".lora_A.weight")], "A")] = tensor
        elif module.endswith(".lora_B.weight"):
            update[delta_key(module[: -len(".lora_B.weight")], "B")] = tensor * scaling
        else:
            raise UserError(f"{weights_path} holds {name!r}, which is not a LoRA matrix")
    return update


def update_bytes(state_dict: dict[str, torch.Tensor]) -> int:
    """Bytes of the tensors of an update (what a sync moves)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in state_dict.values())
