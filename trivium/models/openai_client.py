"""An in-process client shaped like the official ``openai`` one, for workflows written against it.

    client = model.openai_client()          # or model.openai_async_client()
    completion = client.chat.completions.create(messages=[...], n=2, temperature=0.7, tools=[...])
    completion.choices[0].message.content, .tool_calls, .finish_reason

Requests go straight to the ModelWrapper (no HTTP), so they join the wrapper's shared
engine batches, and a conversation sent back continues token-exactly (see
``trivium/models/conversation.py``). With ``enable_history`` every branch is recorded and
``model.extract_experience_from_history()`` returns one experience per conversation.
Responses are the ``openai`` package's own types (``pip install 'trivium[agents]'``); the
served model version is in ``system_fingerprint`` (``trivium-v<version>``).

Supported: ``messages``, ``n``, ``temperature``, ``top_p``, ``max_tokens`` /
``max_completion_tokens``, ``seed``, ``tools`` with ``tool_choice`` ``auto`` or ``none``,
``logprobs``. Anything else (``stop``, ``stream``, ...) is an error that names the argument,
never silently dropped. A forced ``tool_choice`` (``required``, or a named function) is
refused with the same message as the HTTP server's (``tool_choice.py``).
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.models.tool_choice import ToolChoiceError, tools_to_render

if TYPE_CHECKING:
    from trivium.models.wrapper import ModelWrapper

SUPPORTED = (
    "messages",
    "model",
    "n",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "tools",
    "tool_choice",
    "logprobs",
    "top_logprobs",
    "user",
)


def _openai_types():
    try:
        from openai.types import CompletionUsage
        from openai.types.chat import ChatCompletion, ChatCompletionMessage
        from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
        from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall
        from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob
    except ImportError as error:
        raise UserError(
            "the OpenAI-style client returns the openai package's types: pip install 'trivium[agents]'"
        ) from error
    return SimpleNamespace(
        ChatCompletion=ChatCompletion,
        ChatCompletionMessage=ChatCompletionMessage,
        Choice=Choice,
        ChoiceLogprobs=ChoiceLogprobs,
        ToolCall=ChatCompletionMessageToolCall,
        TokenLogprob=ChatCompletionTokenLogprob,
        CompletionUsage=CompletionUsage,
    )


def plain_messages(messages: Any) -> list[dict]:
    """Messages as plain dicts (the openai package's typed messages are accepted too)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise UserError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    result = []
    for index, message in enumerate(messages):
        if hasattr(message, "model_dump"):
            message = message.model_dump(exclude_none=True)
        if not isinstance(message, dict) or "role" not in message:
            raise UserError(f"messages[{index}] must have a 'role'; got {message!r}")
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        result.append(message)
    return result


class _Request:
    """One create() call checked and turned into wrapper arguments."""

    def __init__(self, kwargs: dict[str, Any]):
        unknown = sorted(set(kwargs) - set(SUPPORTED) - {"stream"})
        if unknown:
            raise UserError(
                f"chat.completions.create got unsupported argument(s) {', '.join(unknown)}; "
                f"the in-process client takes: {', '.join(SUPPORTED)}"
            )
        if kwargs.get("stream"):
            raise UserError(
                "stream=True is not supported by the in-process client; read the whole completion"
            )
        if "messages" not in kwargs:
            raise UserError("chat.completions.create needs messages=[...]")
        self.messages = plain_messages(kwargs["messages"])
        self.n = int(kwargs.get("n") or 1)
        self.want_logprobs = bool(kwargs.get("logprobs"))
        try:
            self.tools = tools_to_render(kwargs.get("tool_choice"), kwargs.get("tools"))
        except ToolChoiceError as error:
            raise UserError(str(error)) from error
        max_tokens = kwargs.get("max_completion_tokens") or kwargs.get("max_tokens")
        self.rollout_args = {
            key: value
            for key, value in {
                "temperature": kwargs.get("temperature"),
                "top_p": kwargs.get("top_p"),
                "seed": kwargs.get("seed"),
                "max_tokens": max_tokens,
            }.items()
            if value is not None
        }


class _Completions:
    def __init__(self, client: OpenAIClient, *, asynchronous: bool):
        self._client = client
        self._asynchronous = asynchronous

    def create(self, **kwargs: Any):
        request = _Request(kwargs)
        model = self._client.model
        if self._asynchronous:

            async def run():
                turns = await model.chat_turns_async(
                    request.messages, request.n, tools=request.tools, **request.rollout_args
                )
                return self._client.completion(turns, request)

            return run()
        turns = model.chat_turns(request.messages, request.n, tools=request.tools, **request.rollout_args)
        return self._client.completion(turns, request)


class OpenAIClient:
    """``client.chat.completions.create(...)`` against a ModelWrapper, in process."""

    asynchronous = False

    def __init__(self, model: ModelWrapper, *, model_name: str = "policy"):
        self.model = model
        self.model_name = model_name
        self.chat = SimpleNamespace(completions=_Completions(self, asynchronous=self.asynchronous))
        self.models = SimpleNamespace(list=lambda: [SimpleNamespace(id=model_name, object="model")])

    def completion(self, turns: list[tuple[Experience, dict]], request: _Request):
        types = _openai_types()
        choices = []
        completion_tokens = 0
        for index, (experience, message) in enumerate(turns):
            tool_calls = [types.ToolCall(**call) for call in message.get("tool_calls", [])] or None
            turn_ids, turn_logprobs = last_turn(experience)
            completion_tokens += len(turn_ids)
            finish = experience.info.get("finish_reason", "stop")
            choices.append(
                types.Choice(
                    index=index,
                    message=types.ChatCompletionMessage(
                        role="assistant", content=message.get("content"), tool_calls=tool_calls,
                        # An extra field (the openai types keep them), as vLLM's servers send it.
                        **({"reasoning_content": message["reasoning_content"]} if "reasoning_content" in message else {}),
                    ),
                    finish_reason="tool_calls" if tool_calls else finish,
                    logprobs=self._logprobs(types, turn_ids, turn_logprobs)
                    if request.want_logprobs
                    else None,
                )
            )
        first = turns[0][0]
        prompt_tokens = first.tokens.numel() - len(last_turn(first)[0])
        return types.ChatCompletion(
            id=f"chatcmpl-{uuid.uuid4().hex}",
            object="chat.completion",
            created=int(time.time()),
            model=self.model_name,
            choices=choices,
            system_fingerprint=f"trivium-v{first.model_version}",
            usage=types.CompletionUsage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
        )

    def _logprobs(self, types, ids: list[int], logprobs: list[float]):
        tokenizer = self.model.tokenizer
        content = []
        for token_id, logprob in zip(ids, logprobs):
            text = tokenizer.decode([token_id], skip_special_tokens=False)
            content.append(
                types.TokenLogprob(token=text, logprob=logprob, bytes=list(text.encode()), top_logprobs=[])
            )
        return types.ChoiceLogprobs(content=content)


class AsyncOpenAIClient(OpenAIClient):
    """The same, with ``await client.chat.completions.create(...)``."""

    asynchronous = True


def last_turn(experience: Experience) -> tuple[list[int], list[float]]:
    """The ids and logprobs of the experience's latest model turn (its last run of model tokens);
    none when the episode had no room left for a turn."""
    if experience.episode_truncated and not experience.response_text:
        return [], []
    mask = experience.action_mask.tolist()
    end = len(mask)
    start = end
    while start > 0 and mask[start - 1]:
        start -= 1
    response = experience.response_tokens.tolist()
    logprobs = experience.logprobs.tolist() if experience.logprobs is not None else [0.0] * len(response)
    return response[start:end], logprobs[start:end]
