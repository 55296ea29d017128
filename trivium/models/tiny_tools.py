"""The ``tiny-tools`` preset: the tiny decoder with a tokenizer and chat template that render tools.

Owns the tokenizer of ``trivium init model --preset tiny-tools``: a byte-level BPE trained on
calculator episodes as ``chat_template.CHATML_TOOLS_TEMPLATE`` renders them (the tools
section of the system turn, ``<tool_call>`` JSON, ``<tool_response>`` blocks, answers). Its
merges cross word boundaries (numbers stay pieces of their own), so the template's fixed text
and the calculator's signature become a few long tokens: a whole episode is about 50 tokens,
and the model attends to the question instead of 150 tokens of boilerplate. Other text still
encodes (byte-level), at more tokens each. The architecture is the ``tiny`` preset's
(``tiny.py``), so it trains in seconds on a CPU.

The tags (``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``<tools>``, ...) are single
tokens that are not special: decoding keeps them, so tool-call parsers see them in the reply.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterator
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from trivium.data.tool_arithmetic import generate_tool_arithmetic
from trivium.models.chat_template import (
    CHATML_TOOLS_TEMPLATE,
    TOOLS_CLOSE,
    TOOLS_OPEN,
)
from trivium.models.real_vocab_tokenizer import TAG_TOKENS
from trivium.models.tiny import PRESETS, empty_out_dir, model_config, save_model_dir
from trivium.models.tokenizer_builder import (
    EOS_TOKEN,
    IM_END_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    chatml_tokenizer,
)

PRESET_NAME = "tiny-tools"
# The tags of the template's tools section, besides the call/response/thinking tags.
TOOLS_TAGS = (TOOLS_OPEN, TOOLS_CLOSE)
# Upper bound on the vocabulary; training stops earlier when the corpus runs out of pairs.
MAX_VOCAB_SIZE = 768


def tool_episode_corpus(seed: int, episodes: int = 400) -> Iterator[str]:
    """Calculator episodes as the tools template renders them, cut at the special tokens and
    tags (which are tokens of their own), so BPE learns the pieces the model reads and writes."""
    renderer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE()), chat_template=CHATML_TOOLS_TEMPLATE
    )
    boundaries = re.compile(
        "|".join(re.escape(token) for token in (*SPECIAL_TOKENS, *TAG_TOKENS, *TOOLS_TAGS))
    )
    rng = random.Random(seed)
    for row in generate_tool_arithmetic(episodes, rng):
        text = renderer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
        yield from (piece for piece in boundaries.split(text) if piece)


def train_tools_tokenizer(seed: int = 0) -> Tokenizer:
    """Byte-level BPE whose merges cross word boundaries (numbers excepted), trained on rendered
    calculator episodes: the template's fixed text becomes a few long tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            # Numbers are cut into pieces of two digits from the left, never joined to the text
            # around them: a two-digit operand is one token, a four-digit result two, and the
            # question, the call, the result and the answer are written with the same 110 pieces.
            pre_tokenizers.Split(Regex(r"[0-9]{1,2}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=MAX_VOCAB_SIZE,
        special_tokens=[*SPECIAL_TOKENS, *TAG_TOKENS, *TOOLS_TAGS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )

    def corpus() -> Iterator[str]:
        yield string.printable
        yield from tool_episode_corpus(seed)

    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    # The tags stay single tokens but are not special: decoding keeps them in the text.
    data = json.loads(tokenizer.to_str())
    for added in data["added_tokens"]:
        added["special"] = added["content"] in SPECIAL_TOKENS
    return Tokenizer.from_str(json.dumps(data))


def build_tools_tokenizer(seed: int = 0) -> PreTrainedTokenizerFast:
    """The transformers tokenizer: the tiny preset's pad/eos/ChatML tokens, the tools template."""
    return chatml_tokenizer(train_tools_tokenizer(seed), CHATML_TOOLS_TEMPLATE)


def build_tiny_tools_model(out_dir: str | Path, seed: int = 0) -> Path:
    """Save the tools tokenizer and a random decoder of the tiny preset's shape; returns ``out_dir``.

    The same ``seed`` always gives the same vocabulary and the same weights.
    """
    out_dir = empty_out_dir(out_dir)
    tokenizer = build_tools_tokenizer(seed)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END_TOKEN)
    config = model_config(PRESETS["tiny"], vocab_size=len(tokenizer), pad_id=pad_id, eos_id=eos_id)
    # Seed a forked RNG so building a model never changes the caller's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    return save_model_dir(
        out_dir, model, tokenizer, bos_id=eos_id, stop_ids=[im_end_id, eos_id], pad_id=pad_id
    )
