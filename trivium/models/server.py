"""An OpenAI-compatible HTTP server in front of one trivium inference engine.

Owns the HTTP surface only: request parsing, the OpenAI response shapes, and error bodies.
Sampling is the engine's job; concurrent requests are merged into shared engine calls by a
``RequestBatcher``. Endpoints:

* ``GET /health`` and ``GET /v1/models``; given an engine status (serve mode's engine pool),
  ``GET /engines`` with each engine's state;
* ``POST /v1/completions`` (text or token-id prompts; ``echo`` scores the prompt) and
  ``POST /v1/chat/completions`` (rendered with the tokenizer's chat template; ``tool_choice``
  read as the in-process client reads it, ``tool_choice.py``: a forced call is refused);
* ``POST /v1/trivium/generate`` and ``POST /v1/trivium/logprobs``: the engine interface over
  HTTP, with exact token ids, per-token logprobs and the model version, so experiences built
  from a remote engine are identical to ones built in-process.

Given a session recorder (``mode: serve``, see ``trivium.serve``; or the workflows' sessions of
``enable_openai_api``, see ``trivium.explorer.workflow_api``), chat requests that carry an
``X-Session-Id`` header are recorded token-exactly per session. The session may also be named
in the path, for clients that take only a base URL: ``/sessions/<id>/v1/...`` is served as
``/v1/...`` with that header. A recorder that takes rewards (serve mode's) adds two endpoints
for the outside application's rewards: ``POST /feedback`` and ``POST /commit``. Every response
carries the model version it was served with: the ``X-Model-Version`` header, and in
completions also the ``model_version`` field and ``system_fingerprint`` ``trivium-v<version>``.

The completions endpoint also speaks the token-id dialect of vLLM servers
(``return_tokens_as_token_ids`` gives tokens as ``"token_id:<id>"``), which the ``external``
engine relies on.

The server binds 127.0.0.1 unless told otherwise. Refusals (a wrong API key, a body over the
size limit, too many samples, an unknown model or message role, a malformed body) are 4xx
answers with an OpenAI-style error body; see ``server_guard``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from trivium.errors import UserError
from trivium.models.chat import encode_chat_prompt, render_chat
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams
from trivium.models.engine.batcher import RequestBatcher
from trivium.models.server_guard import (
    BadRequest,
    HTTPProblem,
    ServerLimits,
    check_api_key,
    check_messages,
    check_model_name,
    check_request_size,
    check_samples,
    exposure_warning,
)
from trivium.models.server_requests import (  # noqa: F401 - output_from_dict is imported from here
    SAMPLING_FIELDS,
    TOKEN_ID_PREFIX,
    completion_prompts,
    output_from_dict,
    output_to_dict,
    refuse_streaming,
    requested_tools,
    sampling_params,
    session_rollout_args,
    stop_strings_as_token_ids,
    template_options,
    token_strings,
    usage_counts,
    version_fields,
)
from trivium.models.server_transport import (
    SESSION_HEADER,
    SessionPathPrefix,
    app_in_thread,
    check_port_free,
    free_port,
)

logger = logging.getLogger(__name__)

VERSION_HEADER = "X-Model-Version"


# ---------------------------------------------------------------- the service
class EngineService:
    """The request handlers, independent of the HTTP framework (so they are easy to test)."""

    def __init__(self, engine: InferenceEngine, model_name: str, model_path: str | None = None,
                 limits: ServerLimits = ServerLimits(), sessions: Any = None):
        if engine.tokenizer is None:
            raise UserError("the served engine has no tokenizer; text prompts and chat need one")
        self.engine = engine
        # A SessionRecorder (trivium.models.served_sessions) when chat sessions are recorded for training.
        self.sessions = sessions
        self.tokenizer = engine.tokenizer
        self.model_name = model_name
        self.model_path = model_path
        self.batcher = RequestBatcher(engine)
        self.limits = limits
        self.started = int(time.time())

    def _generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[list[GenerationOutput]]:
        return self.batcher.submit(prompts, params).result()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "model": self.model_name, "model_path": self.model_path,
                "model_version": self.engine.version()}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": self.model_name, "object": "model", "created": self.started, "owned_by": "trivium"}
        ]}

    def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        refuse_streaming(body)
        check_model_name(body.get("model"), self.model_name)
        prompts = completion_prompts(self.tokenizer, body.get("prompt"))
        stop_ids = stop_strings_as_token_ids(self.tokenizer, body.get("stop"))
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        want_logprobs = body.get("logprobs") is not None
        echo = bool(body.get("echo"))
        if echo and body.get("max_tokens") == 0:  # scoring only: nothing is generated
            version = self.engine.version()
            outputs = [[GenerationOutput(prompt_ids=p, token_ids=[], logprobs=[], text="", finish_reason="length",
                                         model_version=version)] for p in prompts]
        else:
            params = sampling_params(body, stop_token_ids=stop_ids)
            check_samples(prompts=len(prompts), n=params.n, limits=self.limits)
            outputs = self._generate(prompts, [params] * len(prompts))
        prompt_scores = self._prompt_logprobs(prompts) if echo and want_logprobs else None
        choices = []
        for prompt_index, (prompt, group) in enumerate(zip(prompts, outputs)):
            for output in group:
                text, token_ids, values = output.text, list(output.token_ids), list(output.logprobs)
                if echo:
                    text = self.tokenizer.decode(prompt) + text
                    token_ids = list(prompt) + token_ids
                    values = prompt_scores[prompt_index] + values if prompt_scores else values
                logprobs = None
                if want_logprobs:
                    logprobs = {"tokens": token_strings(self.tokenizer, token_ids, as_ids), "token_logprobs": values,
                                "top_logprobs": None, "text_offset": None}
                choices.append({"index": len(choices), "text": text, "logprobs": logprobs,
                                "finish_reason": output.finish_reason})
        version = outputs[0][0].model_version
        return {"id": f"cmpl-{time.time_ns()}", "object": "text_completion", "created": int(time.time()),
                "model": self.model_name, "choices": choices, "usage": usage_counts(prompts, outputs),
                **version_fields(version)}

    def _prompt_logprobs(self, prompts: list[list[int]]) -> list[list[float | None]]:
        """Each prompt token's logprob given the ones before it; the first has none."""
        scores = []
        for prompt in prompts:
            if len(prompt) < 2:
                scores.append([None] * len(prompt))
                continue
            values = self.engine.compute_logprobs([prompt], [1])[0].tolist()
            scores.append([None] + values)
        return scores

    def chat_completions(self, body: dict[str, Any], session_id: str | None = None) -> dict[str, Any]:
        refuse_streaming(body)
        check_model_name(body.get("model"), self.model_name)
        messages = body.get("messages")
        check_messages(messages)
        tools = requested_tools(body)
        if session_id is not None:
            return self._session_chat(body, session_id, tools)
        try:
            text = render_chat(self.tokenizer, messages, tools=tools, **template_options(body))
        except UserError:
            raise
        except Exception as error:  # the chat template (Jinja) failed on this request's content
            raise BadRequest(f"the chat template cannot render these messages: {type(error).__name__}: {error}") from error
        prompt = encode_chat_prompt(self.tokenizer, text)
        max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        stop_ids = stop_strings_as_token_ids(self.tokenizer, body.get("stop"))
        params = sampling_params(body, max_tokens_key=max_key, default_max_tokens=256, stop_token_ids=stop_ids)
        check_samples(prompts=1, n=params.n, limits=self.limits)
        outputs = self._generate([prompt], [params])
        with_token_ids = bool(body.get("return_token_ids"))
        choices = []
        for index, output in enumerate(outputs[0]):
            choice = {"index": index, "message": {"role": "assistant", "content": output.text},
                      "finish_reason": output.finish_reason, "logprobs": None}
            if body.get("logprobs"):
                strings = token_strings(self.tokenizer, output.token_ids, bool(body.get("return_tokens_as_token_ids")))
                choice["logprobs"] = {"content": [
                    {"token": s, "logprob": v, "bytes": list(s.encode("utf-8")), "top_logprobs": []}
                    for s, v in zip(strings, output.logprobs)
                ]}
            if with_token_ids:
                choice["token_ids"] = list(output.token_ids)
            choices.append(choice)
        response = {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                    "model": self.model_name, "choices": choices, "usage": usage_counts([prompt], outputs),
                    **version_fields(outputs[0][0].model_version)}
        if with_token_ids:
            response["prompt_token_ids"] = prompt
        return response

    def _session_chat(self, body: dict[str, Any], session_id: str, tools: list[dict] | None) -> dict[str, Any]:
        """A chat turn of a recorded session: sampled through the session recorder, token-exact."""
        if self.sessions is None:
            raise BadRequest(
                f"this server records no sessions (serve mode and enable_openai_api do); drop the {SESSION_HEADER} header"
            )
        n = 1 if body.get("n") is None else body["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadRequest(f"`n` must be a positive integer, got {n!r}")
        check_samples(prompts=1, n=n, limits=self.limits)
        turns = self.sessions.chat(session_id, body["messages"], tools=tools, n=n,
                                   rollout_args=session_rollout_args(body), **template_options(body))
        choices = []
        for index, turn in enumerate(turns):
            message = {"role": "assistant", "content": turn.content}
            if turn.reasoning_content is not None:
                message["reasoning_content"] = turn.reasoning_content
            if turn.tool_calls:
                message["tool_calls"] = turn.tool_calls
            choice = {"index": index, "message": message, "logprobs": None,
                      "finish_reason": "tool_calls" if turn.tool_calls else turn.finish_reason}
            if body.get("logprobs"):
                strings = token_strings(self.tokenizer, turn.token_ids, bool(body.get("return_tokens_as_token_ids")))
                choice["logprobs"] = {"content": [
                    {"token": s, "logprob": v, "bytes": list(s.encode("utf-8")), "top_logprobs": []}
                    for s, v in zip(strings, turn.logprobs)
                ]}
            if body.get("return_token_ids"):
                choice["token_ids"] = list(turn.token_ids)
            choices.append(choice)
        completion_tokens = sum(len(turn.token_ids) for turn in turns)
        prompt_tokens = turns[0].prompt_tokens
        response = {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                    "model": self.model_name, "choices": choices,
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens},
                    "session_id": session_id, **version_fields(turns[0].model_version)}
        if body.get("return_token_ids"):  # the episode so far, the same for every choice
            response["prompt_token_ids"] = list(turns[0].prompt_token_ids)
        return response

    def feedback(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._recorder().feedback(body)

    def commit(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._recorder().commit()

    def _recorder(self) -> Any:
        if self.sessions is None:
            raise BadRequest("this server records no sessions; /feedback and /commit belong to serve mode")
        return self.sessions

    # ---- the trivium extension: the engine interface, token-exact -----------------------
    def trivium_generate(self, body: dict[str, Any]) -> dict[str, Any]:
        prompts = body.get("prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, list) for p in prompts):
            raise BadRequest("`prompts` must be a list of token-id lists")
        raw_params = body.get("params") or {}
        raw_list = raw_params if isinstance(raw_params, list) else [raw_params] * len(prompts)
        if not all(isinstance(raw, dict) for raw in raw_list):
            raise BadRequest("`params` must be an object or a list of objects, one per prompt")
        if len(raw_list) != len(prompts):
            raise BadRequest(f"got {len(raw_list)} params for {len(prompts)} prompts; give one or one per prompt")
        params = []
        for raw in raw_list:
            unknown = sorted(set(raw) - set(SAMPLING_FIELDS))
            if unknown:
                raise BadRequest(f"unknown sampling parameter(s) {unknown}; valid: {list(SAMPLING_FIELDS)}")
            try:
                params.append(SamplingParams(**raw))
            except (TypeError, ValueError) as error:
                raise BadRequest(f"invalid sampling parameters {raw}: {error}") from error
            check_samples(prompts=len(prompts), n=params[-1].n, limits=self.limits)
        outputs = self._generate([list(p) for p in prompts], params) if prompts else []
        return {"outputs": [[output_to_dict(o) for o in group] for group in outputs],
                "model_version": self.engine.version()}

    def trivium_logprobs(self, body: dict[str, Any]) -> dict[str, Any]:
        sequences, prompt_lengths = body.get("sequences"), body.get("prompt_lengths")
        if not isinstance(sequences, list) or not isinstance(prompt_lengths, list):
            raise BadRequest("`sequences` (token-id lists) and `prompt_lengths` (ints) are required")
        try:
            scores = self.engine.compute_logprobs([list(s) for s in sequences], [int(p) for p in prompt_lengths])
        except ValueError as error:
            raise BadRequest(str(error)) from error
        return {"logprobs": [s.tolist() for s in scores], "model_version": self.engine.version()}

    def close(self) -> None:
        self.batcher.close()


def create_app(engine: InferenceEngine, model_name: str = "trivium", model_path: str | None = None, *,
               api_key: str | None = None, limits: ServerLimits = ServerLimits(), sessions: Any = None,
               engine_status: Callable[[], dict[str, Any]] | None = None):
    """A FastAPI app serving ``engine``; ``model_name`` is the id clients send as ``model``.

    With ``api_key``, every endpoint but ``/health`` needs ``Authorization: Bearer <api_key>``.
    With ``sessions`` (a ``trivium.models.served_sessions.SessionRecorder``, or any object with its
    ``chat``), chat requests carrying ``X-Session-Id`` are recorded; ``/feedback`` and ``/commit``
    are served when the recorder declares ``takes_feedback``. With ``engine_status``, ``GET /engines``
    answers what it returns (the state of the engines behind ``engine``).
    """
    from fastapi import FastAPI, Request, Response

    service = EngineService(engine, model_name, model_path, limits, sessions)
    app = FastAPI(title=f"trivium model server ({model_name})")
    app.state.service = service
    app.add_middleware(SessionPathPrefix)

    install_refusals(app, engine, api_key=api_key, limits=limits)

    # Handlers are plain functions: FastAPI runs them in its thread pool, so a slow
    # generation never blocks /health, and concurrent requests meet in the batcher.
    app.get("/health")(service.health)
    app.get("/v1/models")(service.models)
    if engine_status is not None:
        app.get("/engines")(lambda: engine_status())

    def post(path: str, handler) -> None:
        def endpoint(body: dict, response: Response) -> dict:
            result = handler(body)
            if "model_version" in result:
                response.headers[VERSION_HEADER] = str(result["model_version"])
            return result

        app.post(path)(_resolved(endpoint, response=Response))

    post("/v1/completions", service.completions)
    post("/v1/trivium/generate", service.trivium_generate)
    post("/v1/trivium/logprobs", service.trivium_logprobs)

    def chat_completions(body: dict, request: Request, response: Response) -> dict:
        session_id = request.headers.get(SESSION_HEADER)
        result = service.chat_completions(body, session_id)
        response.headers[VERSION_HEADER] = str(result["model_version"])
        return result

    app.post("/v1/chat/completions")(_resolved(chat_completions, request=Request, response=Response))

    if getattr(sessions, "takes_feedback", False):
        post("/feedback", service.feedback)

        def commit(body: dict | None = None) -> dict:  # the body may be left out
            return service.commit(body or {})

        app.post("/commit")(commit)
    app.router.on_shutdown.append(service.close)
    return app


def install_refusals(app: Any, engine: InferenceEngine, *, api_key: str | None, limits: ServerLimits) -> None:
    """The app's error bodies (OpenAI's shape, with the served version) and its guard: the API
    key and the request size bound, checked before any handler runs."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def refuse(problem: HTTPProblem) -> JSONResponse:
        return JSONResponse(status_code=problem.status, content=problem.body(),
                            headers={VERSION_HEADER: str(engine.version())})

    @app.exception_handler(UserError)
    async def user_error(_request: Request, error: UserError) -> JSONResponse:
        return refuse(error if isinstance(error, HTTPProblem) else BadRequest(str(error)))

    @app.exception_handler(RequestValidationError)
    async def malformed_body(_request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        detail = f"{first.get('msg', 'invalid')}{f' at {where}' if where else ''}"
        return refuse(BadRequest(f"the request body must be a JSON object: {detail}"))

    @app.exception_handler(StarletteHTTPException)
    async def framework_refusal(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        # The framework's own refusals (a body it cannot parse, such as a number of more digits
        # than Python reads; an unknown path) in the same error shape, with their cause.
        problem = HTTPProblem(f"{error.detail}: {error.__cause__}" if error.__cause__ else str(error.detail))
        problem.status = error.status_code
        response = refuse(problem)
        response.headers.update(error.headers or {})  # 405's Allow
        return response

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, error: Exception) -> JSONResponse:
        logger.exception("request failed")
        return JSONResponse(status_code=500, content={"error": {
            "message": f"internal error: {type(error).__name__}: {error}", "type": "server_error",
            "param": None, "code": None}})

    @app.middleware("http")
    async def guard(request: Request, call_next):
        try:
            if request.url.path != "/health":
                check_api_key(request.headers.get("authorization"), api_key)
            if request.method == "POST":
                declared = request.headers.get("content-length")
                size = int(declared) if declared and declared.isdigit() else len(await request.body())
                check_request_size(size, limits)
        except HTTPProblem as problem:
            return refuse(problem)
        response = await call_next(request)
        if VERSION_HEADER not in response.headers:  # handlers that sampled set the version they used
            response.headers[VERSION_HEADER] = str(engine.version())
        return response


def _resolved(endpoint, **classes):
    """``endpoint`` with the FastAPI classes its parameters name: this module's annotations are
    strings (``from __future__ import annotations``), and FastAPI, imported lazily, is not
    among the module's globals where it would look them up."""
    endpoint.__annotations__.update(classes)
    return endpoint


# ---------------------------------------------------------------- running it
def serve(engine: InferenceEngine, *, host: str = "127.0.0.1", port: int = 8010, model_name: str = "trivium",
          model_path: str | None = None, log_level: str = "warning", api_key: str | None = None,
          limits: ServerLimits = ServerLimits()) -> None:
    """Serve ``engine`` until interrupted (Ctrl-C / SIGTERM); blocks."""
    import uvicorn

    check_port_free(host, port)
    warning = exposure_warning(host, api_key)
    if warning:
        logger.warning("%s", warning)
    app = create_app(engine, model_name, model_path, api_key=api_key, limits=limits)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


@contextmanager
def serve_in_thread(engine: InferenceEngine, *, host: str = "127.0.0.1", port: int | None = None,
                    model_name: str = "trivium", startup_timeout: float = 30.0, api_key: str | None = None,
                    limits: ServerLimits = ServerLimits(), sessions: Any = None,
                    engine_status: Callable[[], dict[str, Any]] | None = None) -> Iterator[str]:
    """Serve ``engine`` from a background thread for the ``with`` block; yields the ``/v1`` base URL."""
    port = port or free_port(host)
    app = create_app(engine, model_name, api_key=api_key, limits=limits, sessions=sessions,
                     engine_status=engine_status)
    with app_in_thread(app, host=host, port=port, what="model server", startup_timeout=startup_timeout):
        yield f"http://{host}:{port}/v1"
