"""LoRA training through peft: the adapted actor, its reference, what it syncs and saves.

Owns turning ``LoRASettings`` into a peft model whose only trainable parameters are the
adapter's; the reference pass (the same model with its adapter switched off, so no second
copy of the weights); the two sync forms (the adapter alone, see ``models/lora_delta.py``,
or whole merged weights for engines that cannot apply an adapter), gathered whole when the
actor is sharded over several ranks (FSDP2); loading a saved adapter into the actor; and
merging an adapter into its base for a Hugging Face export. The loss code never knows
whether LoRA is on.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from trivium.errors import UserError
from trivium.models.lora_delta import (
    ADAPTER_WEIGHTS,
    PEFT_PREFIX,
    check_plain_lora,
    delta_key,
    is_adapter_dir,
    read_adapter_config,
)
from trivium.trainer.fsdp import whole_tensor
from trivium.trainer.settings import LoRASettings

KEY = "model.lora_configs[0]"
ADAPTER_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def wrap_with_lora(model: torch.nn.Module, lora: LoRASettings) -> torch.nn.Module:
    """``model`` as a peft model with one LoRA adapter; every base weight frozen."""
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError:
        raise UserError('model.lora_configs needs the peft package: pip install "trivium[lora]"') from None

    if lora.init_path:
        check_adapter_matches(lora.init_path, lora)
        wrapped = PeftModel.from_pretrained(model, lora.init_path, is_trainable=True)
    else:
        config = LoraConfig(
            r=lora.rank,
            lora_alpha=lora.alpha,
            target_modules=lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules),
            exclude_modules=lora.exclude_modules,
            lora_dropout=lora.dropout,
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            wrapped = get_peft_model(model, config)
        except ValueError as error:  # peft: no module matched the targets
            raise UserError(f"{KEY}.target_modules={lora.target_modules!r}: {error}") from None
    if lora.dtype != "auto":
        if lora.dtype not in ADAPTER_DTYPES:
            raise UserError(f"{KEY}.lora_dtype={lora.dtype!r}; use auto or one of {sorted(ADAPTER_DTYPES)}")
        for parameter in adapter_parameters(wrapped):
            parameter.data = parameter.data.to(ADAPTER_DTYPES[lora.dtype])
    return wrapped


def check_adapter_matches(path: str, lora: LoRASettings) -> None:
    """An adapter to start from must have the rank and alpha the config states."""
    if not is_adapter_dir(path):
        raise UserError(f"{KEY}.path={path!r} is not an adapter directory (no adapter_config.json saved by peft)")
    config = read_adapter_config(path)
    check_plain_lora(config, f"{KEY}.path={path!r}")
    for key, mine, theirs in adapter_mismatches(config, lora):
        raise UserError(f"{KEY}.{key} is {mine} but the adapter in {path} has {theirs}; set {key}: {theirs}")


def check_checkpoint_adapter(actor_dir: str | Path, lora: LoRASettings) -> None:
    """A checkpoint's adapter resumes only under the LoRA settings it was trained with."""
    for key, mine, theirs in adapter_mismatches(read_adapter_config(actor_dir), lora):
        raise UserError(
            f"{KEY}.{key} is {mine}, but the checkpoint {actor_dir} was trained with {key}: {theirs}. "
            f"To resume it, set {key}: {theirs}; to train with {mine}, start a new run "
            "(continue_from_checkpoint: false, or another name)"
        )


def adapter_mismatches(config: dict, lora: LoRASettings) -> list[tuple[str, float, float]]:
    """(config key, configured, saved) for the rank and alpha an adapter saved by peft disagrees on."""
    pairs = (("lora_rank", lora.rank, config.get("r")), ("lora_alpha", lora.alpha, config.get("lora_alpha")))
    return [(key, mine, theirs) for key, mine, theirs in pairs if theirs is not None and float(mine) != float(theirs)]


def adapter_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [parameter for name, parameter in model.named_parameters() if ".lora_" in name]


@contextmanager
def reference_model(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The base model for KL terms: the adapted model with its adapter switched off."""
    with model.disable_adapter():
        yield model


def _adapted_layers(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(base module name, A, B * scaling) of every layer the active adapter adapts.

    Whole tensors: a sharded model's are gathered, so every rank must iterate to the end.
    """
    from peft.tuners.lora import LoraLayer

    adapter = model.active_adapter
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and adapter in module.lora_A:
            yield (
                name.removeprefix(PEFT_PREFIX),
                whole_tensor(module.lora_A[adapter].weight).detach(),
                whole_tensor(module.lora_B[adapter].weight).detach() * module.scaling[adapter],
            )


def adapter_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapter alone, named as in the update form of ``models/lora_delta.py``."""
    for module, a, b_scaled in _adapted_layers(model):
        yield delta_key(module, "A"), a
        yield delta_key(module, "B"), b_scaled


@torch.no_grad()
def merged_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Whole weights named as in the base model, each adapted one ``W + B @ A`` (for engines without adapters).

    One tensor at a time (a sharded model's gathered, so every rank must iterate to the end);
    the adapter is gathered first, whole.
    """
    deltas = {f"{module}.weight": (a, b) for module, a, b in _adapted_layers(model)}
    for name, tensor in model.get_base_model().state_dict().items():
        if ".lora_" in name:
            continue
        plain = name.replace(".base_layer.", ".")
        tensor = whole_tensor(tensor)
        if plain in deltas:
            a, b = deltas[plain]
            # W = W_base + (alpha / r) * B @ A
            tensor = (tensor.float() + b.float() @ a.float()).to(tensor.dtype)
        yield plain, tensor.detach()


def merged_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain model with the adapter merged in; ``model`` is left as it is."""
    return copy.deepcopy(model).merge_and_unload()


def load_adapter(model: torch.nn.Module, adapter_dir: str | Path) -> None:
    """Put the adapter saved in ``adapter_dir`` (peft's format) into the adapted ``model``."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(adapter_dir) / ADAPTER_WEIGHTS
    if not path.is_file():
        raise UserError(f"{adapter_dir} holds no LoRA adapter ({ADAPTER_WEIGHTS} is missing)")
    state = load_file(str(path))
    expected = len(adapter_parameters(model))
    if len(state) != expected:
        raise UserError(f"the adapter in {adapter_dir} has {len(state)} tensors; the configured adapter has {expected}")
    result = set_peft_model_state_dict(model, state)
    if getattr(result, "unexpected_keys", None):
        raise UserError(f"the adapter in {adapter_dir} does not fit the configured one: {result.unexpected_keys[:3]}")


def merged_model_from_adapter(adapter_dir: str | Path, base_model_path: str | Path) -> torch.nn.Module:
    """Base model + saved adapter, merged into a plain transformers model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    check_plain_lora(read_adapter_config(adapter_dir), str(adapter_dir))
    try:
        base = AutoModelForCausalLM.from_pretrained(str(base_model_path))
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load the base model {base_model_path} of the adapter in {adapter_dir}: {error}") from None
    return PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload().eval()
