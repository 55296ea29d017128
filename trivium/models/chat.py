"""Prompts as token ids: chat templates, plain-text encoding, and prompt truncation.

Owns turning messages or text into the exact prompt ids an engine receives, and the rule for
cutting a prompt that is too long. Knows nothing about engines or sampling.

Tools are never dropped silently: a request with ``tools`` is rendered with and without
them, and a template that writes the same prompt either way (one that does not read
``tools``, like the tiny presets') is an error that names the fix, not a prompt in which the
model cannot see its tools.

Truncation keeps the LAST ``max_prompt_tokens`` tokens (drops from the left): the end of a
chat prompt holds the latest message and the assistant header the model must continue from,
so the cut prompt is still a well-formed place to start a reply. A truncated experience is
flagged ``prompt_truncated`` and left out of the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trivium.errors import UserError


def load_chat_template(chat_template: str | None, chat_template_path: str | None) -> str | None:
    """The template to use: a file's contents win over an inline string; None = the tokenizer's."""
    if chat_template_path:
        path = Path(chat_template_path)
        if not path.is_file():
            raise UserError(
                f"chat_template_path {chat_template_path!r} is not a file; give a Jinja template file"
            )
        return path.read_text()
    return chat_template or None  # the settings carry None for a config's none or null


def render_chat(
    tokenizer,
    messages: list[dict],
    *,
    chat_template: str | None = None,
    enable_thinking: bool | None = None,
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for ``messages``, ending with the assistant generation header (unless
    ``add_generation_prompt=False``)."""
    if not messages:
        raise UserError("chat() needs at least one message")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise UserError(f"message {index} must be a dict with 'role' and 'content'; got {message!r}")
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise UserError(
            "the tokenizer has no chat template; set model.custom_chat_template or model.chat_template_path"
        )
    extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}

    def render(with_tools: list[dict] | None) -> str:
        return tokenizer.apply_chat_template(
            messages,
            chat_template=template,
            tools=with_tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **extra,
        )

    text = render(tools or None)
    if tools:
        refuse_ignored_tools(text, render(None))
    return text


def refuse_ignored_tools(with_tools: str, without_tools: str) -> None:
    """Raise when rendering with the tools gave the same text as without them."""
    if with_tools == without_tools:
        raise UserError(
            "the chat template ignores `tools`: the prompt is the same with and without them, so the "
            "model would answer as if it had none. Use a chat template that renders tools "
            "(model.chat_template_path or model.custom_chat_template; the models of `trivium init model "
            "--preset qwen3-0.6b` and the other real-shape presets carry one), or send no tools."
        )


def encode_chat_prompt(tokenizer, text: str) -> list[int]:
    """Ids of a rendered chat prompt; the template already wrote every special token it wants."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_text_prompt(tokenizer, text: str) -> list[int]:
    """Ids of a raw-text prompt, with the tokenizer's usual special tokens (e.g. BOS)."""
    return list(tokenizer(text)["input_ids"])


@dataclass
class FittedPrompt:
    ids: list[int]
    truncated: bool
    max_tokens: int


def fit_prompt(
    ids: list[int],
    *,
    max_tokens: int,
    max_prompt_tokens: int | None,
    max_model_len: int | None,
    enable_prompt_truncation: bool,
) -> FittedPrompt:
    """Apply the length limits to one prompt and its response budget.

    With truncation on, a prompt over ``max_prompt_tokens`` keeps its last tokens. Either way
    the response budget shrinks so prompt + response <= ``max_model_len``; no room left is an
    error that says which limit to raise.
    """
    truncated = False
    if enable_prompt_truncation and max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
        ids, truncated = ids[-max_prompt_tokens:], True
    if max_model_len is not None:
        room = max_model_len - len(ids)
        if room < 1:
            raise UserError(
                f"prompt has {len(ids)} tokens and max_model_len is {max_model_len}: no room for a response. "
                "Shorten the prompt, set model.enable_prompt_truncation: true, or raise model.max_model_len."
            )
        max_tokens = min(max_tokens, room)
    return FittedPrompt(ids=ids, truncated=truncated, max_tokens=max_tokens)
