"""Tiny local models for the engine and wrapper tests, random weights, nothing downloaded.

* ``llama_path``: the project's tiny Llama from ``trivium.models.tiny``.
* ``qwen2_path``: a Qwen2 (q/k/v biases) of the same size with a small byte-level BPE
  tokenizer and a ChatML template built here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "What is 2 + 3? The answer is 5.",
    "Count down from ten: 10 9 8 7 6 5 4 3 2 1.",
    "The quick brown fox jumps over the lazy dog.",
    "A language model predicts the next token given the previous ones.",
    "Reinforcement learning improves a policy from rewards.",
    "user assistant system think answer question",
] * 20


def build_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )


def _sizes(tokenizer) -> dict:
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": None,
        # Wider than the default init: sharper logits, so greedy ties (flaky comparisons) are unlikely.
        "initializer_range": 0.1,
    }


def save_random_model(out_dir: Path, family: str = "qwen2", seed: int = 0) -> Path:
    if family != "qwen2":
        raise ValueError(f"only qwen2 is built here; use the tiny_model_dir fixture for llama (got {family})")
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**_sizes(tokenizer)))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def qwen2_path(tmp_path_factory) -> str:
    return str(save_random_model(tmp_path_factory.mktemp("tiny_qwen2"), "qwen2"))


@pytest.fixture(scope="session")
def llama_path(tiny_model_dir) -> str:
    """The project's own tiny Llama (trained tokenizer, two end-of-sequence ids)."""
    return tiny_model_dir


@pytest.fixture(scope="session", params=["qwen2", "llama"])
def model_path(request, qwen2_path, llama_path) -> str:
    return qwen2_path if request.param == "qwen2" else llama_path
