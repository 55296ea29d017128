"""A locally trained tokenizer with a real model's vocabulary size.

Owns the tokenizer half of the real-shape presets (``real_shapes.py``): a byte-level BPE
trained on local text (the tiny tokenizer's corpus, plus the chat template's tool and
thinking text), its special tokens, and the reserved ids that bring it to the preset's
vocabulary size, so the model's embedding has the public model's shape (151,936 rows for
Qwen, 128,256 for Llama 3). Knows nothing about model weights.

Ids: the chat tokens first (``<|endoftext|>`` 0, ``<|im_start|>`` 1, ``<|im_end|>`` 2, then
the non-special tags ``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>``,
``<tool_response>``, ``</tool_response>``, which decoding keeps so parsers see them), then
the trained tokens, then ``<|reserved_special_token_N|>`` up to the vocabulary size. The
reserved ids are vocabulary entries that no merge produces: text never encodes to them, and
they decode to their names. They are not added tokens because transformers copies every
added token when it loads a tokenizer: 150,000 of them take seconds per load.

Loading: for ``qwen2`` checkpoints transformers rebuilds the tokenizer as its
``Qwen2Tokenizer`` from the vocabulary and merges, with that class's own normalizer and
pre-tokenizer. This tokenizer is trained with exactly that pipeline (NFC, transformers'
Qwen2 split pattern, byte-level with no prefix space), so ``AutoTokenizer.from_pretrained``
gives back the same tokenizer for every preset (tested on the backend's whole JSON). The
split pattern cuts every digit on its own, so arithmetic stays learnable.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from trivium.models.chat_template import (
    CHATML_TOOLS_TEMPLATE,
    IM_END,
    IM_START,
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    TOOLS_INTRO,
    TOOLS_OUTRO,
)
from trivium.models.tokenizer_builder import training_corpus

END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)
TAG_TOKENS = (THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)
RESERVED_TOKEN = "<|reserved_special_token_{}|>"
# Stops BPE training well before the reserved ids; the corpus runs out of pairs long before.
MAX_TRAINED_TOKENS = 8192

_EXAMPLE_TOOLS = (
    ("get_weather", "Current weather for a city.", {"city": "Oslo", "days": 2}),
    ("calculator", "Evaluate an arithmetic expression.", {"expression": "(3 + 5) * 2"}),
    ("search", "Search the web and return the top results.", {"query": "capital of Norway", "limit": 3}),
    ("move", "Move one step on the map.", {"direction": "down"}),
)


def chat_corpus(seed: int) -> Iterator[str]:
    """The chat template's fixed text, tool signatures, calls, responses and thinking."""
    rng = random.Random(seed)
    for _ in range(3):  # repeated, so the template's words get merges of their own
        yield TOOLS_INTRO + TOOLS_OUTRO
        for name, description, arguments in _EXAMPLE_TOOLS:
            properties = {key: {"type": "integer" if isinstance(v, int) else "string"} for key, v in arguments.items()}
            signature = {
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": {"type": "object", "properties": properties, "required": list(arguments)},
                },
            }
            yield json.dumps(signature)
            yield f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n{TOOL_CALL_CLOSE}'
            yield f"{TOOL_RESPONSE_OPEN}\n{rng.randint(0, 99)} degrees, sunny\n{TOOL_RESPONSE_CLOSE}"
        yield f"{THINK_OPEN}\nLet me think about which function to call and with which arguments.\n{THINK_CLOSE}\n\n"


def train_bpe(seed: int) -> Tokenizer:
    """Byte-level BPE with transformers' Qwen2 normalizer and pre-tokenizer; chat tokens first."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=MAX_TRAINED_TOKENS,
        special_tokens=list(SPECIAL_TOKENS + TAG_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )

    def corpus() -> Iterator[str]:
        yield from training_corpus(seed)
        yield from chat_corpus(seed)

    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


def padded_to(tokenizer: Tokenizer, vocab_size: int) -> Tokenizer:
    """The trained tokenizer with reserved entries up to ``vocab_size``, its tags made non-special,
    and its BPE fields spelled as transformers' Qwen2 rebuild spells them."""
    data = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    trained = len(vocab)
    if vocab_size < trained:
        raise ValueError(f"vocab_size {vocab_size} is below the {trained} tokens the tokenizer already has")
    for index in range(vocab_size - trained):
        vocab[RESERVED_TOKEN.format(index)] = trained + index
    data["model"]["continuing_subword_prefix"] = ""
    data["model"]["end_of_word_suffix"] = ""
    for added in data["added_tokens"]:
        added["special"] = added["content"] in SPECIAL_TOKENS
        added["normalized"] = False
    return Tokenizer.from_str(json.dumps(data))


def build_real_vocab_tokenizer(vocab_size: int, seed: int = 0, model_max_length: int = 32768) -> PreTrainedTokenizerFast:
    """The transformers tokenizer: ``len()`` is ``vocab_size``; eos ``<|im_end|>``, pad
    ``<|endoftext|>``; trivium's chat template (tools, thinking) attached."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=padded_to(train_bpe(seed), vocab_size),
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
    if len(tokenizer) != vocab_size:
        raise RuntimeError(f"the padded tokenizer has {len(tokenizer)} tokens, not {vocab_size}")
    return tokenizer
