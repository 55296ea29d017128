"""Tiny local decoder models, built from scratch and saved in Hugging Face format.

Owns ``trivium init model``: pick a size preset, train the tokenizer, create a randomly
initialised Llama-architecture decoder from a seed, and save both so ``AutoTokenizer`` and
``AutoModelForCausalLM`` load the directory. Nothing is downloaded. The weights are random;
these models exist so every part of the system can run and be tested on a CPU.

Why Llama and not Qwen2: for ``qwen2`` checkpoints transformers swaps in its own tokenizer
class (a different pre-tokenizer and normalizer); for ``llama`` it loads ``tokenizer.json``
exactly as it was trained. Models with the shapes of public ones (Qwen2, Qwen3, Llama 3,
their real vocabulary sizes) are built by ``real_shapes.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from trivium.core.keyword_fields import keyword_fields
from trivium.errors import UserError
from trivium.models.tokenizer_builder import EOS_TOKEN, IM_END_TOKEN, PAD_TOKEN, build_tokenizer


@dataclass(frozen=True)
class TinyModelPreset:
    # Upper bound: the tokenizer stops growing when its corpus has no more frequent pairs.
    max_vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int = 2048


PRESETS: dict[str, TinyModelPreset] = {
    # ~0.8M parameters: fast enough to train for a few steps inside a unit test.
    "tiny": TinyModelPreset(
        max_vocab_size=384,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=344,
    ),
    # ~6M parameters: can actually learn two-digit addition on a CPU in minutes.
    "small": TinyModelPreset(
        max_vocab_size=512,
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=688,
    ),
    # ~25M parameters: the largest size the scaling benchmark sweeps on a CPU.
    "medium": TinyModelPreset(
        max_vocab_size=512,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=1536,
    ),
}


def model_config(preset: TinyModelPreset, vocab_size: int, pad_id: int, eos_id: int) -> LlamaConfig:
    """The decoder's architecture; ``vocab_size`` is the trained tokenizer's real size."""
    return LlamaConfig(
        vocab_size=vocab_size,
        **keyword_fields(preset, leave_out=("max_vocab_size",)),  # the rest are LlamaConfig's own names
        tie_word_embeddings=True,
        initializer_range=0.02,
        # The tokenizer adds no BOS token; end-of-text doubles as BOS.
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )


def build_tiny_model(out_dir: str | Path, preset: str = "tiny", seed: int = 0) -> Path:
    """Build and save a tokenizer and a randomly initialised decoder; returns ``out_dir``.

    The same ``preset`` and ``seed`` always give the same vocabulary and the same weights.
    """
    if preset not in PRESETS:
        raise UserError(f"Unknown model preset '{preset}'. Choose one of: {', '.join(PRESETS)}.")
    spec = PRESETS[preset]
    out_dir = empty_out_dir(out_dir)
    tokenizer = build_tokenizer(vocab_size=spec.max_vocab_size, seed=seed)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END_TOKEN)
    config = model_config(spec, vocab_size=len(tokenizer), pad_id=pad_id, eos_id=eos_id)

    # Seed a forked RNG so building a model never changes the caller's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    return save_model_dir(out_dir, model, tokenizer, bos_id=eos_id, stop_ids=[im_end_id, eos_id], pad_id=pad_id)


def empty_out_dir(out_dir: str | Path) -> Path:
    """``trivium init model``'s ``--out``: a new or empty directory."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UserError(f"Output directory {out_dir} is not empty; choose a new --out directory.")
    return out_dir


def save_model_dir(out_dir: Path, model: torch.nn.Module, tokenizer, *, bos_id: int, stop_ids: list[int],
                   pad_id: int) -> Path:
    """Save ``model`` and ``tokenizer`` where transformers loads them, sampling by default and
    stopping at any of ``stop_ids`` (a chat reply's end, then plain text's)."""
    model.generation_config = GenerationConfig(
        bos_token_id=bos_id, eos_token_id=stop_ids, pad_token_id=pad_id, do_sample=True, temperature=1.0,
        top_p=1.0, top_k=0,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
