"""Token-in, token-out conversations: one multi-turn episode as one growing token sequence.

Owns the rule for extending a conversation: a model turn appends the engine's exact sampled
ids and logprobs (trained, ``action_mask`` True); the environment's or tools' messages in
between append the chat template's ids for those messages only (not trained, logprob 0).
Decoded model text is never encoded again.

The environment's ids come from rendering the whole conversation with the template and
keeping what comes after the text the sequence already holds. That needs the template to be
prefix-preserving: rendering turn k+1 must start with exactly what turn k gave (text and
ids). When it does not (templates that rewrite earlier turns, e.g. drop old reasoning), the
sequence still continues from what the model really saw: the new messages' ids come from the
rendering of the conversation without and with them, after the template's end of the last
reply when the sequence lacks it (a reply cut by ``max_tokens``), and the turn is counted as
drift. A reply holding a special token takes that path too: its kept text drops the token.

Knows nothing about engines, batching or sampling parameters; the ModelWrapper drives it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field, replace

import torch

from trivium.core.episode_turns import TURNS_KEY, episode_turns
from trivium.core.experience import Experience
from trivium.core.sampling_mask import SamplingMask
from trivium.errors import UserError
from trivium.models.chat import encode_chat_prompt, render_chat
from trivium.models.engine.base import GenerationOutput

# Message fields that identify a turn when a caller sends a conversation back.
_KEY_FIELDS = ("role", "content", "tool_call_id", "name")
# Put at the end of the last reply to find where the template's text after that reply begins.
_REPLY_END = "\x00trivium-reply-end\x00"


@dataclass(frozen=True)
class TemplateDrift:
    """The template rendered turn ``turn + 1`` differently from what turn ``turn`` held."""

    turn: int
    kind: str  # "text": the rendered text diverges; "ids": same text, different token ids
    detail: str


@dataclass
class Renderer:
    """How messages become prompt text and ids for one model (template, thinking, tools)."""

    tokenizer: object
    chat_template: str | None = None
    enable_thinking: bool | None = None

    def text(self, messages: list[dict], tools: list[dict] | None, *, generation_prompt: bool = True) -> str:
        return render_chat(
            self.tokenizer,
            messages,
            chat_template=self.chat_template,
            enable_thinking=self.enable_thinking,
            tools=tools,
            add_generation_prompt=generation_prompt,
        )

    def ids(self, text: str) -> list[int]:
        return encode_chat_prompt(self.tokenizer, text)


@dataclass
class Conversation:
    """One branch of a multi-turn episode, immutable once sampled from (extensions copy it).

    ``tokens`` = prompt (the first rendering) followed by every later turn; the per-token
    lists (``logprobs``, ``action_mask``) cover ``tokens[prompt_length:]``.
    """

    messages: list[dict]  # as rendered: assistant turns hold the model's raw text
    tools: list[dict] | None
    tokens: list[int]
    prompt_length: int
    prompt_text: str
    # The text ``tokens`` stand for, special tokens included: the prefix a re-render must keep.
    text: str
    logprobs: list[float] = field(default_factory=list)
    action_mask: list[bool] = field(default_factory=list)
    prompt_truncated: bool = False
    model_turns: int = 0
    drifts: list[TemplateDrift] = field(default_factory=list)
    # Ended at max_model_len: no room for another turn (or for the environment's reply).
    truncated: bool = False
    last_output: GenerationOutput | None = None
    # As the caller sees them (assistant turns with parsed tool calls); they find the branch again.
    visible_messages: list[dict] = field(default_factory=list)
    conversation_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # The state right after the latest model turn, and the one before it: a session's
    # recorded experience is replaced by its continuation.
    turn_id: str | None = None
    previous_turn_id: str | None = None
    # How its turns are rendered (template, thinking); None: the wrapper's
    renderer: Renderer | None = None
    # Text every reply starts with: after each generation prompt, as prompt tokens (not trained)
    reply_prefix: str = ""
    # How many of ``messages`` the first rendering (the prompt) holds
    prompt_messages: int = 0
    # Each token's kept set after ``prompt_length`` (sampling-mask replay); None when not recorded
    sampling_mask: SamplingMask | None = None

    @classmethod
    def start(
        cls,
        *,
        messages: list[dict],
        tools: list[dict] | None,
        ids: list[int],
        text: str,
        prompt_truncated: bool,
        renderer: Renderer | None = None,
        reply_prefix: str = "",
    ) -> Conversation:
        """``text`` and ``ids`` end with ``reply_prefix`` when there is one."""
        return cls(
            renderer=renderer,
            reply_prefix=reply_prefix,
            messages=[dict(m) for m in messages],
            visible_messages=[dict(m) for m in messages],
            prompt_messages=len(messages),
            tools=tools,
            tokens=list(ids),
            prompt_length=len(ids),
            prompt_text=text,
            text=text,
            prompt_truncated=prompt_truncated,
        )

    def fork(self) -> Conversation:
        return replace(
            self,
            messages=list(self.messages),
            visible_messages=list(self.visible_messages),
            tokens=list(self.tokens),
            logprobs=list(self.logprobs),
            action_mask=list(self.action_mask),
            drifts=list(self.drifts),
            conversation_id=uuid.uuid4().hex,
        )

    @property
    def key(self) -> str:
        return conversation_key(self.visible_messages, self.tools)

    # ---- growing the sequence ------------------------------------------------------------

    def with_model_turn(
        self, output: GenerationOutput, *, rendered_message: dict, visible_message: dict, tokenizer
    ) -> Conversation:
        """A copy with the engine's sampled ids and logprobs appended (trained tokens)."""
        grown = self.fork()
        count = len(output.token_ids)
        grown.tokens.extend(output.token_ids)
        grown.logprobs.extend(output.logprobs if output.logprobs else [0.0] * count)
        grown.action_mask.extend([True] * count)
        if output.sampling_mask is not None:
            before = self.sampling_mask or SamplingMask.unrecorded(len(self.tokens) - self.prompt_length)
            grown.sampling_mask = before.extended(output.sampling_mask)
        grown.text += tokenizer.decode(output.token_ids, skip_special_tokens=False)
        grown.messages.append(rendered_message)
        grown.visible_messages.append(visible_message)
        grown.model_turns += 1
        grown.last_output = output
        grown.previous_turn_id, grown.turn_id = self.turn_id, grown.conversation_id
        return grown

    def with_environment(self, new_messages: list[dict], renderer: Renderer) -> Conversation:
        """A copy with the template's ids for ``new_messages`` appended (not trained)."""
        grown = self.fork()
        everything = self.messages + [dict(m) for m in new_messages]
        rendered = renderer.text(everything, self.tools)
        if rendered.startswith(self.text):
            rendered_ids = renderer.ids(rendered)
            if rendered_ids[: len(self.tokens)] == self.tokens:
                added = rendered_ids[len(self.tokens) :]
            else:  # the same text, but the model's ids are not how the tokenizer would write it
                added = renderer.ids(rendered[len(self.text) :])
                grown.drifts.append(
                    TemplateDrift(
                        self.model_turns, "ids", "the model's sampled ids differ from the tokenizer's"
                    )
                )
            grown.text = rendered
        else:
            added = self._ids_of_new_messages(new_messages, renderer)
            grown.drifts.append(TemplateDrift(self.model_turns, "text", _divergence(self.text, rendered)))
            grown.text = self.text + renderer.tokenizer.decode(added, skip_special_tokens=False)
        if self.reply_prefix:  # the next reply starts with it too
            added = added + renderer.ids(self.reply_prefix)
            grown.text += self.reply_prefix
        grown.tokens.extend(added)
        grown.logprobs.extend([0.0] * len(added))
        grown.action_mask.extend([False] * len(added))
        if self.sampling_mask is not None:
            grown.sampling_mask = self.sampling_mask.extended(SamplingMask.unrecorded(len(added)))
        grown.messages = everything
        grown.visible_messages = self.visible_messages + [dict(m) for m in new_messages]
        return grown

    def _ids_of_new_messages(self, new_messages: list[dict], renderer: Renderer) -> list[int]:
        """The template's text for the new messages alone: render without and with them."""
        before = renderer.text(self.messages, self.tools, generation_prompt=False)
        after = renderer.text(self.messages + list(new_messages), self.tools)
        if not after.startswith(before):
            raise UserError(
                "the chat template rewrites earlier turns when a message is added, so the environment's "
                f"tokens of turn {self.model_turns + 1} cannot be told apart "
                f"({_divergence(before, after)}); use a template that renders each message on its own "
                "(model.custom_chat_template or model.chat_template_path)"
            )
        return renderer.ids(self._unwritten_closing(renderer) + after[len(before) :])

    def _unwritten_closing(self, renderer: Renderer) -> str:
        """What the template writes after the last model turn (its end-of-turn text) and the
        sequence does not hold yet: all of it after a reply cut by ``max_tokens``, the rest of
        it after one that ended with its end-of-turn token. Empty unless a model turn is last."""
        if not self.messages or self.messages[-1].get("role") != "assistant":
            return ""
        probe = dict(self.messages[-1], content=str(self.messages[-1].get("content") or "") + _REPLY_END)
        rendered = renderer.text(self.messages[:-1] + [probe], self.tools, generation_prompt=False)
        if _REPLY_END not in rendered:  # the template does not write the reply's content as given
            return ""
        closing = rendered[rendered.index(_REPLY_END) + len(_REPLY_END) :]
        output = self.last_output
        if output is not None and output.finish_reason == "stop" and output.token_ids:
            stop = renderer.tokenizer.decode(output.token_ids[-1:], skip_special_tokens=False)
            if stop and closing.startswith(stop):  # the sequence holds the end-of-turn token already
                return closing[len(stop) :]
        return closing

    # ---- the result ----------------------------------------------------------------------

    def to_experience(self) -> Experience:
        """The episode so far. After one model turn ``response_text`` is the reply; after several
        it is every turn after the prompt (the template's text of the environment's messages
        included), and ``info["turns"]`` holds each message with its span (``core/episode_turns.py``)."""
        output = self.last_output
        experience = Experience(
            tokens=torch.tensor(self.tokens, dtype=torch.long),
            prompt_length=self.prompt_length,
            logprobs=torch.tensor(self.logprobs, dtype=torch.float32),
            action_mask=torch.tensor(self.action_mask, dtype=torch.bool),
            model_version=output.model_version if output is not None else 0,
            prompt_truncated=self.prompt_truncated,
            episode_truncated=self.truncated,
            prompt_text=self.prompt_text,
            response_text=output.text if output is not None else "",
            info={
                "finish_reason": "length" if self.truncated or output is None else output.finish_reason,
                "model_turns": self.model_turns,
                "conversation_id": self.conversation_id,
            },
            metrics=self.drift_metrics() if self.model_turns > 1 else {},
            sampling_mask=self.sampling_mask,
        )
        if self.model_turns > 1:
            experience.response_text = self.text_after_prompt()
            experience.info[TURNS_KEY] = episode_turns(
                messages=self.messages,
                prompt_messages=self.prompt_messages,
                prompt_length=self.prompt_length,
                action_mask=self.action_mask,
                reply_prefix=self.reply_prefix,
            )
        return experience

    def text_after_prompt(self) -> str:
        if self.text.startswith(self.prompt_text):
            return self.text[len(self.prompt_text) :]
        tokenizer = self.renderer.tokenizer if self.renderer is not None else None
        if tokenizer is None:
            return ""
        return tokenizer.decode(self.tokens[self.prompt_length :], skip_special_tokens=False)

    def drift_metrics(self) -> dict[str, float]:
        """Turns whose re-rendering diverged: in text (the template) or only in ids (tokenization)."""
        return {
            "template_drift": float(sum(d.kind == "text" for d in self.drifts)),
            "retokenized_turns": float(sum(d.kind == "ids" for d in self.drifts)),
        }


def conversation_key(messages: list[dict], tools: list[dict] | None) -> str:
    """A digest of the turns (role, content, tool ids) and tools: equal conversations, equal keys."""
    turns = [{name: message.get(name) or "" for name in _KEY_FIELDS} for message in messages]
    payload = json.dumps([turns, tools or []], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(payload.encode()).hexdigest()


def _divergence(held: str, rendered: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(held, rendered)) if a != b), min(len(held), len(rendered)))
    held, rendered = held[at : at + 30], rendered[at : at + 30]
    return f"first difference at character {at}: held {held!r}, rendered {rendered!r}"
