"""Random-weight models with the exact architecture of public models.

Owns the real-shape presets of ``trivium init model`` (``qwen2.5-0.5b``, ``qwen3-0.6b``,
``llama3.2-1b``): each holds the numbers of the public model's ``config.json`` (layers,
widths, heads, RoPE, norms, positions, vocabulary size), and ``build_real_shape_model``
saves a randomly initialised model of that architecture with a locally trained tokenizer of
the same vocabulary size (``real_vocab_tokenizer.py``) and trivium's chat template with
tools and thinking (``chat_template.py``). ``layers`` cuts the depth, for tests on a CPU.
Nothing is downloaded. Every preset shares the tokenizer and the template, whatever the
public model's own; the architecture is what matches.

Weights are saved in bfloat16, as the public checkpoints are; trivium's trainer and hf
engine load them as ``model.dtype`` says (float32 by default). The tiny presets live in
``tiny.py``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import CONFIG_MAPPING, AutoModelForCausalLM, PretrainedConfig

from trivium.errors import UserError
from trivium.models.real_vocab_tokenizer import END_OF_TEXT, IM_END, build_real_vocab_tokenizer
from trivium.models.tiny import empty_out_dir, save_model_dir


@dataclass(frozen=True)
class RealShape:
    """A public model's architecture, with its config.json's names."""

    public_model: str
    model_type: str  # transformers' model type: qwen2, qwen3, llama
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    # Only where it differs from hidden_size // num_attention_heads.
    head_dim: int | None = None
    # RoPE scaling as config.json writes it (rope_type and its parameters); None: plain RoPE.
    rope_scaling: tuple[tuple[str, Any], ...] | None = None

    def config_kwargs(self, num_hidden_layers: int, *, rope_in_one_dict: bool = True) -> dict[str, Any]:
        """Keyword arguments of the transformers config class. ``rope_in_one_dict``: transformers 5
        keeps theta and scaling in ``rope_parameters``; transformers 4 takes them apart."""
        kwargs: dict[str, Any] = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "initializer_range": 0.02,
        }
        scaling = dict(self.rope_scaling or ())
        if rope_in_one_dict:
            kwargs["rope_parameters"] = {"rope_type": "default", **scaling, "rope_theta": self.rope_theta}
        else:
            kwargs["rope_theta"] = self.rope_theta
            kwargs["rope_scaling"] = scaling or None
        if self.head_dim is not None:
            kwargs["head_dim"] = self.head_dim
        return kwargs


REAL_SHAPES: dict[str, RealShape] = {
    # Qwen2 architecture: q/k/v projections with biases.
    "qwen2.5-0.5b": RealShape(
        public_model="Qwen/Qwen2.5-0.5B",
        model_type="qwen2",
        vocab_size=151_936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    # Qwen3 architecture: RMSNorm on each head's queries and keys, no q/k/v biases.
    "qwen3-0.6b": RealShape(
        public_model="Qwen/Qwen3-0.6B",
        model_type="qwen3",
        vocab_size=151_936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40_960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    # Llama architecture with Llama 3's long-context RoPE scaling.
    "llama3.2-1b": RealShape(
        public_model="meta-llama/Llama-3.2-1B",
        model_type="llama",
        vocab_size=128_256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131_072,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_scaling=(
            ("rope_type", "llama3"),
            ("factor", 32.0),
            ("low_freq_factor", 1.0),
            ("high_freq_factor", 4.0),
            ("original_max_position_embeddings", 8192),
        ),
    ),
}


def checked_depth(preset: str, layers: int | None) -> int:
    """``layers``, or the public depth when None; a depth the public model does not have is an error."""
    shape = REAL_SHAPES[preset]
    if layers is None:
        return shape.num_hidden_layers
    if not 1 <= layers <= shape.num_hidden_layers:
        raise UserError(
            f"--layers {layers} is out of range for {preset}: give 1 to {shape.num_hidden_layers} "
            f"({shape.public_model} has {shape.num_hidden_layers} layers)"
        )
    return layers


def real_shape_config(preset: str, *, layers: int | None = None, pad_id: int = 0, eos_id: int = 0,
                      bos_id: int | None = None) -> PretrainedConfig:
    """The transformers config of ``preset``, ``layers`` deep (default: the public depth)."""
    shape = REAL_SHAPES[preset]
    depth = checked_depth(preset, layers)
    config_class = CONFIG_MAPPING[shape.model_type]
    rope_in_one_dict = "rope_parameters" in inspect.signature(config_class.__init__).parameters
    return config_class(
        **shape.config_kwargs(depth, rope_in_one_dict=rope_in_one_dict),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="bfloat16",
    )


def build_real_shape_model(out_dir: str | Path, preset: str, *, layers: int | None = None, seed: int = 0) -> Path:
    """Save a tokenizer and a random ``preset``-shaped decoder to ``out_dir``; returns ``out_dir``.

    The same preset, depth and seed always give the same tokenizer and the same weights.
    """
    if preset not in REAL_SHAPES:
        raise UserError(f"Unknown real-shape preset '{preset}'. Choose one of: {', '.join(REAL_SHAPES)}.")
    out_dir = empty_out_dir(out_dir)
    shape = REAL_SHAPES[preset]
    checked_depth(preset, layers)
    tokenizer = build_real_vocab_tokenizer(shape.vocab_size, seed=seed, model_max_length=shape.max_position_embeddings)
    end_of_text = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    # The tokenizer adds no BOS token; end-of-text doubles as BOS, as in Qwen's configs.
    config = real_shape_config(preset, layers=layers, pad_id=end_of_text, eos_id=im_end, bos_id=end_of_text)

    model = random_model(config, seed)
    return save_model_dir(out_dir, model, tokenizer, bos_id=end_of_text, stop_ids=[im_end, end_of_text],
                          pad_id=end_of_text)


def random_model(config: PretrainedConfig, seed: int) -> nn.Module:
    """A bfloat16 decoder of ``config`` with seeded random weights, for saving.

    transformers' own init gives projections and embeddings N(0, initializer_range) (the
    padding row zero), norms ones and biases zeros. The same is done here once per tensor:
    built the usual way, a 150,000-row embedding is filled three times (torch's default, the
    output head before it is tied, transformers' init), several seconds on a CPU.
    Buffers that are not saved (RoPE frequencies) stay empty: run the model by loading the
    directory it is saved to.
    """
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.to_empty(device="cpu")
    model.tie_weights()
    std = config.initializer_range
    filled: set[int] = set()
    # Seed a forked RNG so building a model never changes the caller's random state.
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for module in model.modules():
            for name, parameter in module.named_parameters(recurse=False):
                if id(parameter) in filled:
                    continue  # a tied weight, filled where it was first met
                filled.add(id(parameter))
                if name == "bias":
                    parameter.zero_()
                elif isinstance(module, (nn.Linear, nn.Embedding)):
                    parameter.normal_(0.0, std)
                    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                        parameter[module.padding_idx].zero_()
                elif "RMSNorm" in type(module).__name__:
                    parameter.fill_(1.0)
                else:
                    raise RuntimeError(f"no initialisation rule for {type(module).__name__}.{name}")
    saved = set(model.state_dict())
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    if saved - parameters:  # a persistent buffer would be saved uninitialised
        raise RuntimeError(f"buffers without an initialisation rule: {sorted(saved - parameters)}")
    return model
