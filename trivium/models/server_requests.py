"""The HTTP model server's request parsing and response shaping (``server.py``).

Turns an OpenAI-style request body into engine calls' arguments (sampling parameters, stop
tokens, prompts, chat-template options, a recorded session's rollout arguments, the tools a
``tool_choice`` renders), each refusal a ``BadRequest`` naming the field; and turns engine
outputs into the response's token strings, usage counts and version fields.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from trivium.models.chat import encode_text_prompt
from trivium.models.engine.base import GenerationOutput, SamplingParams
from trivium.models.server_guard import BadRequest
from trivium.models.tool_choice import ToolChoiceError, tools_to_render

TOKEN_ID_PREFIX = "token_id:"
SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))
# Request keys that map one-to-one onto SamplingParams (OpenAI names plus vLLM's extras).
_PASSTHROUGH_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "min_tokens", "n", "seed")


# ---------------------------------------------------------------- request parsing
def requested_tools(body: dict[str, Any]) -> list[dict] | None:
    """The tools a chat request's template renders, by its ``tool_choice`` (the in-process
    client's rule, ``tool_choice.py``): a forced choice is refused with the client's message."""
    try:
        return tools_to_render(body.get("tool_choice"), body.get("tools"))
    except ToolChoiceError as error:
        raise BadRequest(str(error)) from error


def sampling_params(body: dict[str, Any], *, max_tokens_key: str = "max_tokens", default_max_tokens: int = 16,
                    stop_token_ids: tuple[int, ...] = ()) -> SamplingParams:
    """SamplingParams from an OpenAI-style request body; unset keys keep the OpenAI defaults."""
    args = {key: body[key] for key in _PASSTHROUGH_SAMPLING_KEYS if body.get(key) is not None}
    max_tokens = body.get(max_tokens_key)
    args["max_tokens"] = default_max_tokens if max_tokens is None else max_tokens
    stop_ids = tuple(body.get("stop_token_ids") or ()) + tuple(stop_token_ids)
    if stop_ids:
        args["stop_token_ids"] = stop_ids
    try:
        args["min_tokens"] = min(int(args.get("min_tokens", 0)), int(args["max_tokens"]))
        return SamplingParams(**args)
    except (TypeError, ValueError) as error:
        raise BadRequest(f"invalid sampling parameters: {error}") from error


def stop_strings_as_token_ids(tokenizer, stop: str | list[str] | None) -> tuple[int, ...]:
    """``stop`` strings that are exactly one token become stop ids; longer ones are refused."""
    if not stop:
        return ()
    stops = [stop] if isinstance(stop, str) else list(stop)
    ids = []
    for text in stops:
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise BadRequest(
                f"stop string {text!r} is {len(encoded)} tokens; this server stops on single tokens only "
                "(use a one-token stop string or stop_token_ids)"
            )
        ids.append(int(encoded[0]))
    return tuple(ids)


def completion_prompts(tokenizer, prompt: Any) -> list[list[int]]:
    """The token ids of each prompt: a string, a list of ids, or a list of either."""
    if isinstance(prompt, str):
        return [encode_text_prompt(tokenizer, prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    if isinstance(prompt, list) and prompt:
        return [ids for item in prompt for ids in completion_prompts(tokenizer, item)]
    raise BadRequest("`prompt` must be a non-empty string, list of token ids, or a list of those")


def refuse_streaming(body: dict[str, Any]) -> None:
    if body.get("stream"):
        raise BadRequest("streaming is not supported by this server; send stream=false")


def template_options(body: dict[str, Any]) -> dict[str, Any]:
    """A request's ``chat_template_kwargs``: ``enable_thinking`` reaches the chat template; other keys are refused."""
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise BadRequest("`chat_template_kwargs` must be an object")
    unknown = sorted(set(kwargs) - {"enable_thinking"})
    if unknown:
        raise BadRequest(f"`chat_template_kwargs` {unknown} are not supported; only enable_thinking is")
    enable_thinking = kwargs.get("enable_thinking")
    if enable_thinking is None:
        return {}
    if not isinstance(enable_thinking, bool):
        raise BadRequest(f"`chat_template_kwargs.enable_thinking` must be true or false, got {enable_thinking!r}")
    return {"enable_thinking": enable_thinking}


def session_rollout_args(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling keys of a recorded chat request, as the model wrapper's rollout arguments."""
    if body.get("stop") or body.get("stop_token_ids"):
        raise BadRequest("`stop` is not supported in recorded sessions; the model stops at its end-of-turn token")
    args = {key: body[key] for key in ("temperature", "top_p", "top_k", "repetition_penalty", "min_tokens", "seed")
            if body.get(key) is not None}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        args["max_tokens"] = max_tokens
    for key, value in args.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"`{key}` must be a number, got {value!r}")
    if "max_tokens" in args and (not isinstance(args["max_tokens"], int) or args["max_tokens"] < 1):
        raise BadRequest(f"`max_tokens` must be a positive integer, got {args['max_tokens']!r}")
    return args


# ---------------------------------------------------------------- response shaping
def token_strings(tokenizer, token_ids: list[int], as_ids: bool) -> list[str]:
    if as_ids:
        return [f"{TOKEN_ID_PREFIX}{t}" for t in token_ids]
    return [tokenizer.decode([t]) for t in token_ids]


def usage_counts(prompts: list[list[int]], outputs: list[list[GenerationOutput]]) -> dict[str, int]:
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(o.token_ids) for group in outputs for o in group)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def output_to_dict(output: GenerationOutput) -> dict[str, Any]:
    return asdict(output)


def output_from_dict(data: dict[str, Any]) -> GenerationOutput:
    return GenerationOutput(**{f.name: data[f.name] for f in fields(GenerationOutput) if f.name in data})


def version_fields(version: int) -> dict[str, Any]:
    """The served model version, as trivium's field and in OpenAI's ``system_fingerprint``."""
    return {"model_version": int(version), "system_fingerprint": f"trivium-v{int(version)}"}
