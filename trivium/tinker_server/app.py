"""The HTTP routes of the Tinker API that trivium serves, with its API key and size bound.

Routes (all under ``/api/v1``): ``healthz``, ``get_server_capabilities``, ``client/config``,
``client/dynamic_config``, ``create_session``, ``session_heartbeat``, ``telemetry`` (accepted,
not kept), ``sessions/<id>/finish``; ``create_model``, ``get_info``, ``forward_backward``,
``optim_step``, ``save_weights``, ``load_weights``, ``save_weights_for_sampler``;
``create_sampling_session``, ``samplers/<id>``, ``asample``; and ``retrieve_future``, which
waits up to ``POLL_SECONDS`` for a result and otherwise answers 408 (the SDK polls again).
Any other path is a 404 naming the served ones. With an API key, every request must carry
it (``X-API-Key``, as the SDK sends it, or ``Authorization: Bearer``); a body over
``max_request_bytes`` is refused with 413 as soon as it passes the bound.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from trivium.models.server_guard import HTTPProblem
from trivium.tinker_server import wire
from trivium.tinker_server.jobs import JobFailed
from trivium.tinker_server.state import TinkerState

POLL_SECONDS = 20.0
# What the SDK reads at start-up: no JWT exchange, requests sent one after another and
# uncompressed, each sample polled on its own.
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "use_pyqwest_transport": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
}


class Guard:
    """ASGI middleware in front of every route: the API key, then the body, read whole up to
    ``max_bytes`` (413 past it, declared or streamed) and handed on to the route."""

    def __init__(self, app, *, api_key: str | None, max_bytes: int):
        self.app, self.api_key, self.max_bytes = app, api_key, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers") or []
        }
        if self.api_key is not None and not self._has_key(headers):
            return await _answer(
                send,
                401,
                "missing or wrong API key: send it as X-API-Key (the SDK's api_key) or Authorization: Bearer",
            )
        if headers.get("content-encoding", "identity") != "identity":
            return await _answer(send, 415, "compressed request bodies are not served here")
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await self._too_large(send)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _has_key(self, headers: dict[str, str]) -> bool:
        given = headers.get("x-api-key", "")
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        if not given and scheme.lower() == "bearer":
            given = bearer.strip()
        return hmac.compare_digest(given.encode(), self.api_key.encode())

    async def _too_large(self, send) -> None:
        await _answer(
            send,
            413,
            f"the request body is over this server's limit of {self.max_bytes} bytes (--max-request-bytes)",
        )


async def _answer(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_app(state: TinkerState, *, api_key: str | None = None, max_request_bytes: int = 64 * 2**20):
    """The served app for ``state``, behind the API-key and body-size ``Guard``."""
    app = FastAPI(title="trivium Tinker API")
    app.state.tinker = state
    app.exception_handler(HTTPProblem)(refused)
    register_session_routes(app, state)
    register_training_routes(app, state)
    register_sampling_routes(app, state)
    register_retrieve_future_route(app, state)
    register_not_served_route(app)
    return Guard(app, api_key=api_key, max_bytes=max_request_bytes)


async def refused(_request, problem: HTTPProblem):
    """A refused request as the JSON ``{"detail": ...}`` the SDK reads, with the problem's status."""
    return JSONResponse({"detail": str(problem)}, status_code=problem.status)


async def json_body(request: Request) -> dict:
    """The request body as a JSON object; an ``HTTPProblem`` when it is not one."""
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        raise HTTPProblem("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPProblem("the request body must be a JSON object")
    return body


def future(request_id: str, **extra) -> dict:
    """The answer to a queued call: the id to poll ``retrieve_future`` with."""
    return {"request_id": request_id, **extra}


def register_session_routes(app: FastAPI, state: TinkerState) -> None:
    """Health, capabilities, the client's start-up configuration, and client sessions."""

    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        return state.capabilities()

    @app.post("/api/v1/client/config")
    async def client_config():
        return CLIENT_CONFIG

    @app.post("/api/v1/client/dynamic_config")
    async def client_dynamic_config():
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

    @app.post("/api/v1/create_session")
    async def create_session():
        return {"type": "create_session", "session_id": state.create_session()}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        state.session((await json_body(request)).get("session_id", ""))
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/telemetry")
    async def telemetry():
        return {"status": "accepted"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str):
        state.session(session_id)
        return {}


def register_training_routes(app: FastAPI, state: TinkerState) -> None:
    """The training model: create it, describe it, train it, save and load its weights."""
    # The calls whose JSON body starts a job and whose answer is the job's future.
    json_jobs = {
        "create_model": state.create_model,
        "optim_step": state.optim_step,
        "save_weights": state.save_weights,
        "load_weights": state.load_weights,
        "save_weights_for_sampler": state.save_weights_for_sampler,
    }
    for name, start_job in json_jobs.items():
        app.add_api_route(f"/api/v1/{name}", _json_job_endpoint(start_job), methods=["POST"], name=name)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        return state.info((await json_body(request)).get("model_id", ""))

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        if request.headers.get("content-type") != "application/x-protobuf":
            raise HTTPProblem(
                "forward_backward takes a ForwardBackwardRequest protobuf body (application/x-protobuf)"
            )
        call = wire.parse_forward_backward(await request.body())
        return future(state.forward_backward(call), model_id=call.model_id)


def _json_job_endpoint(start_job: Callable[[dict], str]) -> Callable[[Request], Awaitable[dict]]:
    async def endpoint(request: Request):  # no return annotation: FastAPI would read it as a response model
        return future(start_job(await json_body(request)))

    return endpoint


def register_sampling_routes(app: FastAPI, state: TinkerState) -> None:
    """Sampling sessions and the samples drawn from them."""

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        sampler_id = state.create_sampling_session(await json_body(request))
        return {"type": "create_sampling_session", "sampling_session_id": sampler_id}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str):
        sampler = state.sampler(sampler_id)
        return {
            "sampler_id": sampler.sampler_id,
            "base_model": sampler.base_model,
            "model_path": sampler.model_path,
        }

    @app.post("/api/v1/asample")
    async def asample(request: Request):
        request_id, sequence_ids = state.sample(await json_body(request))
        return future(request_id, sample_sequence_ids=sequence_ids)


def register_retrieve_future_route(app: FastAPI, state: TinkerState) -> None:
    """``retrieve_future``: a queued call's result, or 408 after ``POLL_SECONDS`` (the SDK polls again)."""

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        request_id = (await json_body(request)).get("request_id", "")
        pending = state.jobs.future(request_id)
        if pending is None:
            return JSONResponse({"detail": f"no request {request_id!r} on this server"}, status_code=404)
        try:
            result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), POLL_SECONDS)
        except asyncio.TimeoutError:
            return JSONResponse(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}, status_code=408
            )
        except JobFailed as failure:
            return {"error": str(failure), "category": failure.category}
        if isinstance(result.body, bytes):
            return Response(result.body, media_type=result.media_type)
        return result.body


def register_not_served_route(app: FastAPI) -> None:
    """Every other path: a 404 naming the served ones. Registered last, so it matches only those."""

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def not_served(path: str, request: Request):
        served = [
            f"{method} {route.path}"
            for route in app.routes
            if getattr(route, "path", "").startswith("/api/v1/")
            for method in sorted(route.methods)
        ]
        detail = (
            f"{request.method} /{path} is not served by trivium's Tinker server; served: {', '.join(served)}"
        )
        return JSONResponse({"detail": detail}, status_code=404)
