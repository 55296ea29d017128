"""Train a small byte-level BPE tokenizer locally and wrap it for transformers.

Owns the tokenizer half of ``trivium init model``: the special tokens, the chat template
and the training corpus. Knows nothing about model weights.

Why byte-level: every string (any Unicode) round-trips through the 256 byte tokens, so
nothing a user types is ever mapped to an unknown token. Digits are split into single
tokens before BPE runs, so no merge ever joins two digits and arithmetic stays learnable.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from trivium.data.arithmetic import generate_arithmetic
from trivium.data.countdown import generate_countdown
from trivium.data.prompts import COUNTDOWN_SYSTEM_PROMPT, MATH_SYSTEM_PROMPT

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
# Order fixes the ids: pad=0, eos=1, im_start=2, im_end=3.
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN)

# ChatML-style turns. The ``generation`` block marks assistant text so that
# ``apply_chat_template(..., return_assistant_tokens_mask=True)`` can find it for SFT.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] or '' }}{{- '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# A little general text so common words and tags get their own merges.
_GENERAL_TEXT = (
    "You are a helpful assistant. Think step by step, then give the final answer. "
    "Question: Answer: Let me think. First, then, so, because, therefore, which means the result is. "
    "<think> </think> <answer> </answer> \\boxed{} system user assistant tool"
)


def training_corpus(seed: int) -> Iterator[str]:
    """The texts the built-in tasks produce, the workflows' prompts, and every printable character."""
    rng = random.Random(seed)
    yield string.printable
    yield _GENERAL_TEXT
    yield MATH_SYSTEM_PROMPT
    yield COUNTDOWN_SYSTEM_PROMPT
    rows = generate_arithmetic(3000, rng, subtraction=True) + generate_countdown(1500, rng, num_numbers=3)
    rows += generate_countdown(500, rng, num_numbers=4)
    for row in rows:
        yield row["question"]
        yield row["response"]


def train_tokenizer(vocab_size: int, seed: int = 0) -> Tokenizer:
    """A byte-level BPE with split digits and the special tokens first in the vocabulary.

    ``vocab_size`` is an upper bound: training stops early once no pair of tokens occurs
    twice, which on this narrow corpus happens a little under 400 tokens.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(seed), trainer=trainer)
    return tokenizer


def build_tokenizer(vocab_size: int = 512, seed: int = 0) -> PreTrainedTokenizerFast:
    """The transformers tokenizer: pad/eos set, chat template attached, left padding off."""
    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size must be at least {minimum} (256 bytes + special tokens), got {vocab_size}"
        )
    return chatml_tokenizer(train_tokenizer(vocab_size, seed), CHAT_TEMPLATE)


def chatml_tokenizer(tokenizer_object: Tokenizer, chat_template: str) -> PreTrainedTokenizerFast:
    """A trained ``tokenizers.Tokenizer`` as the local presets' transformers tokenizer: their
    pad/eos and ChatML tokens, ``chat_template`` attached."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        additional_special_tokens=[IM_START_TOKEN, IM_END_TOKEN],
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )
    tokenizer.chat_template = chat_template
    return tokenizer
