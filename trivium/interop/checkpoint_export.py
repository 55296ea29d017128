"""Export a trainer checkpoint (``RUN/global_step_N/actor``) as a plain Hugging Face model
directory that ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer`` load directly.

Reads the checkpoint only; writes only into the output directory. The model is rebuilt
from the checkpoint's ``config.json`` and its weights are loaded strictly (a weight may be
absent only when it is tied to one that is present, as ``save_pretrained`` stores them).
A LoRA run's checkpoint holds an adapter (peft's format) instead: ``merge_lora`` loads its
base model, merges the adapter in, and writes the merged model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from trivium.errors import UserError
from trivium.models.lora_delta import ADAPTER_WEIGHTS, is_adapter_dir, read_adapter_config

RESOLVED_CONFIG = "config.resolved.yaml"
HF_EXPORT = "huggingface"
SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def actor_dir_of(step_dir: str | Path, *, merge_lora: bool = False) -> Path:
    """The actor directory of a step directory, with a clear error when the layout is wrong."""
    step_dir = Path(step_dir)
    if not step_dir.is_dir():
        siblings = (
            sorted(p.name for p in step_dir.parent.glob("global_step_*")) if step_dir.parent.is_dir() else []
        )
        hint = f" Checkpoints there: {', '.join(siblings)}." if siblings else ""
        raise UserError(f"checkpoint directory not found: {step_dir}.{hint}")
    actor_dir = step_dir / "actor"
    if not actor_dir.is_dir():
        raise UserError(f"{step_dir} has no actor/ directory; give a RUN/global_step_N directory")
    if is_adapter_dir(actor_dir):
        if not merge_lora:
            raise UserError(
                f"{actor_dir} holds a LoRA adapter, not whole weights; pass --merge-lora to write the base "
                "model with the adapter merged in"
            )
        if not (actor_dir / ADAPTER_WEIGHTS).is_file():
            raise UserError(f"{actor_dir} is incomplete: missing {ADAPTER_WEIGHTS}")
        return actor_dir
    if merge_lora:
        raise UserError(f"{actor_dir} holds whole weights, no LoRA adapter; leave out --merge-lora")
    missing = [name for name in ("config.json",) if not (actor_dir / name).is_file()]
    if not (actor_dir / SINGLE_FILE).is_file() and not (actor_dir / SHARD_INDEX).is_file():
        missing.append(SINGLE_FILE)
    if missing:
        raise UserError(f"{actor_dir} is incomplete: missing {', '.join(missing)}")
    return actor_dir


def load_actor_state_dict(actor_dir: Path) -> dict[str, torch.Tensor]:
    """The actor's weights, from one safetensors file or from the shards its index lists."""
    if (actor_dir / SINGLE_FILE).is_file():
        return load_file(actor_dir / SINGLE_FILE)
    index = json.loads((actor_dir / SHARD_INDEX).read_text())
    state_dict: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        if not (actor_dir / shard).is_file():
            raise UserError(f"{actor_dir} is incomplete: missing the weight shard {shard}")
        state_dict.update(load_file(actor_dir / shard))
    return state_dict


def tokenizer_source(step_dir: Path, tokenizer_path: str | Path | None = None) -> Path | str:
    """Where the tokenizer comes from: the argument, the step's export, or the run's base model."""
    if tokenizer_path is not None:
        return tokenizer_path
    export = step_dir / "actor" / HF_EXPORT
    if any((export / name).is_file() for name in TOKENIZER_FILES):
        return export
    resolved = step_dir.parent / RESOLVED_CONFIG
    if not resolved.is_file():
        raise UserError(
            f"no tokenizer found for {step_dir}: {resolved} is missing and the step has no "
            f"actor/{HF_EXPORT}/ export; pass the base model with --tokenizer PATH"
        )
    config = OmegaConf.to_container(OmegaConf.load(resolved), resolve=True)
    model_path = (config.get("model") or {}).get("model_path")
    if not model_path:
        raise UserError(f"{resolved} has no model.model_path; pass the base model with --tokenizer PATH")
    return model_path


def base_model_of(step_dir: Path, actor_dir: Path, base_model_path: str | Path | None = None) -> str:
    """The base model of a LoRA checkpoint: the argument, the path peft recorded, or the run's model.model_path."""
    candidates = [base_model_path] if base_model_path is not None else [
        read_adapter_config(actor_dir).get("base_model_name_or_path"),
        _resolved_model_path(step_dir),
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "config.json").is_file():
            return str(candidate)
    tried = ", ".join(repr(str(c)) for c in candidates if c) or "nothing recorded"
    raise UserError(f"cannot find the base model of the adapter in {actor_dir} (tried {tried}); pass --base-model PATH")


def _resolved_model_path(step_dir: Path) -> str | None:
    resolved = step_dir.parent / RESOLVED_CONFIG
    if not resolved.is_file():
        return None
    config = OmegaConf.to_container(OmegaConf.load(resolved), resolve=True)
    return (config.get("model") or {}).get("model_path")


def load_actor(actor_dir: Path) -> torch.nn.Module:
    """The actor model rebuilt from ``config.json`` with the checkpoint's weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    state_dict = load_actor_state_dict(actor_dir)
    floating = [tensor.dtype for tensor in state_dict.values() if tensor.is_floating_point()]
    config = AutoConfig.from_pretrained(actor_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=floating[0] if floating else torch.float32)
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    untied_missing = _missing_untied(model, missing, set(state_dict))
    if untied_missing or unexpected:
        parts = []
        if untied_missing:
            parts.append(f"missing weights: {', '.join(untied_missing[:5])}")
        if unexpected:
            parts.append(f"weights the model does not have: {', '.join(unexpected[:5])}")
        raise UserError(f"the weights in {actor_dir} do not fit its config.json ({'; '.join(parts)})")
    return model.eval()


def _missing_untied(model: torch.nn.Module, missing: list[str], loaded: set[str]) -> list[str]:
    """Missing names that do not share storage with a loaded weight (tied weights are fine)."""
    state = model.state_dict()
    loaded_storage = {state[name].data_ptr() for name in loaded if name in state}
    return [name for name in missing if state[name].data_ptr() not in loaded_storage]


def export_checkpoint(
    step_dir: str | Path,
    out_dir: str | Path | None = None,
    tokenizer_path: str | Path | None = None,
    *,
    merge_lora: bool = False,
    base_model_path: str | Path | None = None,
) -> Path:
    """Write ``step_dir``'s actor as a Hugging Face model with tokenizer; returns the directory.

    ``out_dir`` defaults to ``step_dir/actor/huggingface``. The tokenizer comes from
    ``tokenizer_path``, else an existing ``actor/huggingface`` export, else the run's base
    model (``model.model_path`` in ``config.resolved.yaml`` next to the step directory).
    """
    from transformers import AutoTokenizer

    step_dir = Path(step_dir)
    actor_dir = actor_dir_of(step_dir, merge_lora=merge_lora)
    out_dir = Path(out_dir) if out_dir is not None else actor_dir / HF_EXPORT
    base = base_model_of(step_dir, actor_dir, base_model_path) if merge_lora else None
    # fail before writing anything; a LoRA checkpoint's tokenizer is its base model's by default
    source = tokenizer_source(step_dir, tokenizer_path if tokenizer_path is not None else base)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load the tokenizer from {source}: {error}") from None
    if merge_lora:
        from trivium.trainer.lora import merged_model_from_adapter

        model = merged_model_from_adapter(actor_dir, base)
    else:
        model = load_actor(actor_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if Path(source).resolve() != out_dir.resolve():
        tokenizer.save_pretrained(out_dir)
    generation_config = actor_dir / "generation_config.json"
    if generation_config.is_file() and actor_dir.resolve() != out_dir.resolve():
        shutil.copyfile(generation_config, out_dir / "generation_config.json")
    return out_dir
