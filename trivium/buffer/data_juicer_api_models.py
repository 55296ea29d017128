"""The models a Data-Juicer operator calls through an OpenAI-compatible API.

The address is the operator's ``model_params.base_url``, else the environment's
(``OPENAI_BASE_URL``...), as Data-Juicer reads it. A plan notes each model and its address;
a run asks each one short question before the pipeline starts, because Data-Juicer turns a
failed call into an empty reply that scores the sample 0.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from trivium.buffer.data_juicer_checks import data_juicer_operators, models_recorded, with_defaults
from trivium.errors import UserError


def api_models(name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The models the operator calls through an OpenAI-compatible API, as Data-Juicer asks for them.

    Each is the keyword set of Data-Juicer's ``prepare_model(model_type="api", ...)``:
    ``model``, ``endpoint`` and the operator's ``model_params`` (``base_url``, ``api_key``...).
    """
    cls = data_juicer_operators()[name]
    # A construction failure is operator_problem's to report.
    with models_recorded(cls) as requested, contextlib.suppress(Exception):
        cls(**with_defaults(args))
    return [kwargs for model_type, kwargs in requested if model_type == "api"]


def api_base_url(model: dict[str, Any]) -> str:
    """Where Data-Juicer sends the model's requests: its ``base_url``, else the environment's."""
    for value in (
        model.get("base_url"),
        os.environ.get("OPENAI_BASE_URL"),
        os.environ.get("OPENAI_API_URL"),
        os.environ.get("DASHSCOPE_BASE_URL"),
    ):
        if value:
            return str(value).rstrip("/")
    return "https://api.openai.com/v1"  # the OpenAI client's own default


def api_note(name: str, args: dict[str, Any]) -> str | None:
    """What a plan says of an operator that calls models through an API, or None."""
    models = api_models(name, args)
    if not models:
        return None
    called = ", ".join(f"'{m.get('model')}' at {api_base_url(m)}" for m in models)
    return (
        f"the Data-Juicer operator '{name}' calls the model {called} for every sample (set "
        "OPENAI_BASE_URL and OPENAI_API_KEY, or args.model_params.base_url, for another OpenAI-compatible "
        "service); the run asks it once before the pipeline starts and stops if it does not answer"
    )


def check_api_models(name: str, args: dict[str, Any], timeout: float = 30.0) -> None:
    """Ask each API model of the operator one short question; UserError naming it when none comes.

    Data-Juicer turns a failed call into an empty reply (a score of 0), so an unreachable
    service would otherwise score every sample 0 without a word.
    """
    import httpx

    for model in api_models(name, args):
        base_url = api_base_url(model)
        endpoint = str(model.get("endpoint") or "/chat/completions")
        url = endpoint if endpoint.startswith("http") else base_url + "/" + endpoint.lstrip("/")
        key = model.get("api_key") or os.environ.get("OPENAI_API_KEY") or os.environ.get("DASHSCOPE_API_KEY")
        body = {
            "model": model.get("model"),
            "messages": [{"role": "user", "content": "Say OK."}],
            "max_tokens": 4,
        }
        try:
            response = httpx.post(
                url, json=body, headers={"Authorization": f"Bearer {key or ''}"}, timeout=timeout
            )
            response.raise_for_status()
            answered = bool(response.json().get("choices"))
        except (httpx.HTTPError, ValueError) as error:
            raise UserError(
                f"the Data-Juicer operator '{name}' calls the model '{model.get('model')}' at {url}, which did "
                f"not answer ({type(error).__name__}: {error}); start that service or point OPENAI_BASE_URL "
                "(or args.model_params.base_url) at one that serves the model"
            ) from error
        if not answered:
            raise UserError(
                f"the Data-Juicer operator '{name}' calls the model '{model.get('model')}' at {url}, whose "
                "answer has no `choices`: it is not an OpenAI-compatible chat endpoint"
            )
