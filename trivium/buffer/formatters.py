"""Formatters: dataset rows -> training Experiences, through a tokenizer's chat template.

Owns SFT formatting (``plaintext`` prompt/response columns, or ``messages`` dialogues,
optionally training every assistant turn) and DPO formatting (a chosen and a rejected
answer to one prompt -> two Experiences, [chosen, rejected], sharing a group_id), and raw
text rows for continued pre-training (``prompt_type: raw``: every token trained, no template).

Masks come from text segments: the chat template renders the dialogue up to each trained
assistant turn (with the generation prompt) and up to its end, each rendering must extend the
previous one, and every segment is tokenized on its own, so a token never straddles a
prompt/response boundary. Untrained messages between two boundaries make one segment, as the
rendered prompt does at generation. ``action_mask`` is True exactly on the tokens of trained
assistant turns (including the template's end-of-turn marker).
"""

from __future__ import annotations

from typing import Any

import torch

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.models.chat import refuse_ignored_tools

Message = dict[str, Any]


class ChatRenderer:
    """Renders message lists with a tokenizer's (or an override) chat template."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self._reads_tools = False  # shown once: the template's text changes with the tools
        if chat_template is None and getattr(tokenizer, "chat_template", None) is None:
            raise UserError(
                "The tokenizer has no chat template; set format.chat_template (or "
                "model.custom_chat_template) to a Jinja template."
            )

    def render(self, messages: list[Message], tools: list | None, add_generation_prompt: bool) -> str:
        kwargs = {"chat_template": self.chat_template} if self.chat_template else {}

        def text(with_tools: list | None) -> str:
            return self.tokenizer.apply_chat_template(
                messages, tools=with_tools, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
            )

        rendered = text(tools or None)
        if tools and not self._reads_tools:  # a template that does not read tools would train without them
            refuse_ignored_tools(rendered, text(None))
            self._reads_tools = True
        return rendered

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []


def tokenize_dialogue(
    renderer: ChatRenderer, messages: list[Message], tools: list | None, trained_turns: set[int]
) -> tuple[list[int], list[bool], int]:
    """(tokens, per-token trained flag, prompt_length) of a dialogue ending with an assistant turn.

    ``trained_turns`` are indices of assistant messages whose tokens enter the loss. The
    prompt is everything before the first trained turn's content.
    """
    tokens: list[int] = []
    trained: list[bool] = []
    rendered = ""
    prompt_length = None

    def extend(text: str, flag: bool) -> None:
        nonlocal rendered
        if not text.startswith(rendered):
            raise UserError(
                "The chat template does not render dialogues prefix by prefix (a later turn "
                "changes earlier text), so prompt and response tokens cannot be separated. "
                "Use a template that only appends, e.g. via format.chat_template."
            )
        piece = renderer.encode(text[len(rendered):])
        tokens.extend(piece)
        trained.extend([flag] * len(piece))
        rendered = text

    last = len(messages) - 1
    for i, message in enumerate(messages):
        if message.get("role") == "assistant" and i in trained_turns:
            extend(renderer.render(messages[:i], tools, add_generation_prompt=True), False)
            if prompt_length is None:
                prompt_length = len(tokens)
            extend(renderer.render(messages[: i + 1], tools, add_generation_prompt=False), True)
        elif i == last:  # untrained messages at the end; earlier ones go with the next trained turn
            extend(renderer.render(messages, tools, add_generation_prompt=False), False)
    if prompt_length is None:
        raise UserError("A dialogue has no assistant turn to train on.")
    return tokens, trained, prompt_length


def to_experience(tokens: list[int], trained: list[bool], prompt_length: int, **fields: Any) -> Experience:
    return Experience(
        tokens=torch.tensor(tokens, dtype=torch.long),
        prompt_length=prompt_length,
        action_mask=torch.tensor(trained[prompt_length:], dtype=torch.bool),
        **fields,
    )


def _as_messages(value: Any, role: str, what: str) -> list[Message]:
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return [dict(m) for m in value]
    raise UserError(f"{what} must be a string or a list of {{'role', 'content'}} messages, got {type(value).__name__}")


def raw_text_experience(tokenizer: Any, text: Any) -> Experience:
    """Continued pre-training: a raw text row -> an Experience trained on every token.

    No chat template: the tokens are the tokenizer's BOS (when it has one), the text's tokens
    and its EOS (when it has one). The first token is the only context (``prompt_length`` 1);
    every later token is a response token, so the loss covers the whole sequence.
    """
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"a raw text row needs a non-empty string, got {text!r}")
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)
    tokens = ([bos] if bos is not None else []) + tokenizer.encode(text, add_special_tokens=False)
    tokens += [eos] if eos is not None else []
    if len(tokens) < 2:
        raise UserError(f"a raw text row must make at least two tokens, got {len(tokens)} from {text!r}")
    return to_experience(tokens, [False] + [True] * (len(tokens) - 1), 1, info={"source": "cpt"})


class SFTFormatter:
    """Rows -> one SFT Experience each (``prompt_type`` plaintext or messages; ``raw``: the
    ``prompt_key`` column's text, trained on every token, without a chat template)."""

    def __init__(self, tokenizer: Any, fmt: dict[str, Any]):
        self.fmt = fmt
        self.tokenizer = tokenizer
        self.raw = fmt.get("prompt_type") == "raw"
        self.renderer = None if self.raw else ChatRenderer(tokenizer, fmt.get("chat_template"))

    def _tools(self, row: dict[str, Any]) -> list | None:
        key = self.fmt.get("tools_key")
        return row.get(key) if key else None

    def _system(self, row: dict[str, Any]) -> list[Message]:
        key = self.fmt.get("system_prompt_key")
        system = (row.get(key) if key else None) or self.fmt.get("system_prompt")
        return [{"role": "system", "content": system}] if system else []

    def _required(self, row: dict[str, Any], key_name: str) -> Any:
        column = self.fmt.get(key_name)
        if not column or row.get(column) is None:
            raise UserError(f"row has no '{column}' (format.{key_name}); columns are {sorted(row)}")
        return row[column]

    def prompt_messages(self, row: dict[str, Any]) -> list[Message]:
        """System + user messages for a plaintext row; the row's dialogue for messages rows."""
        if self.fmt.get("prompt_type") == "messages":
            return _as_messages(self._required(row, "messages_key"), "user", "messages")
        return self._system(row) + _as_messages(self._required(row, "prompt_key"), "user", "prompt")

    def format(self, row: dict[str, Any]) -> Experience:
        if self.raw:
            return raw_text_experience(self.tokenizer, self._required(row, "prompt_key"))
        if self.fmt.get("prompt_type") == "messages":
            messages = self.prompt_messages(row)
            while messages and messages[-1].get("role") != "assistant":
                messages.pop()  # nothing after the last assistant turn is trained
            assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
            if not assistant:
                raise UserError("a messages row has no assistant turn to train on")
            trained = set(assistant) if self.fmt.get("enable_concatenated_multi_turn") else {assistant[-1]}
        else:
            response = self._required(row, "response_key")
            messages = self.prompt_messages(row) + [{"role": "assistant", "content": str(response)}]
            trained = {len(messages) - 1}
        tokens, flags, prompt_length = tokenize_dialogue(self.renderer, messages, self._tools(row), trained)
        return to_experience(tokens, flags, prompt_length, info={"source": "sft"})


class DPOFormatter(SFTFormatter):
    """Rows -> [chosen, rejected] Experiences with one shared group_id."""

    def format_pair(self, row: dict[str, Any], group_id: str) -> list[Experience]:
        if self.raw:
            raise UserError("format.prompt_type 'raw' is for continued pre-training; DPO pairs need plaintext or messages")
        prompt = self.prompt_messages(row)
        while prompt and prompt[-1].get("role") == "assistant" and self.fmt.get("prompt_type") == "messages":
            prompt.pop()  # a dialogue prompt ends before the answers being compared
        pair = []
        for key_name, label in (("chosen_key", "chosen"), ("rejected_key", "rejected")):
            answer = _as_messages(self._required(row, key_name), "assistant", label)
            messages = prompt + answer
            trained = {len(prompt) + i for i, m in enumerate(answer) if m.get("role") == "assistant"}
            tokens, flags, prompt_length = tokenize_dialogue(self.renderer, messages, self._tools(row), trained)
            pair.append(to_experience(tokens, flags, prompt_length, group_id=group_id, info={"dpo": label}))
        return pair
