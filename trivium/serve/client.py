"""``Client``: a small Python client of a ``mode: serve`` run (chat, feedback, commit) over httpx.

    client = Client("http://127.0.0.1:8010")
    session_id = client.new_session()                      # one per episode
    reply = client.chat([{"role": "user", "content": "Hi"}], session_id=session_id, max_tokens=16)
    client.feedback(session_id, reward=1.0)
    client.commit()                                        # -> {"sessions": 1, "experiences": 1, ...}

``chat`` returns the OpenAI-shaped completion as a dict (``reply["choices"][0]["message"]``),
with the served ``model_version``. Refusals raise ``ServeError`` with the server's message
and HTTP status. Applications written against the ``openai`` package need none of this:
they send the header ``X-Session-Id`` themselves (docs/serve.md).
"""

from __future__ import annotations

import uuid
from typing import Any

from trivium.errors import UserError

SESSION_HEADER = "X-Session-Id"


class ServeError(UserError):
    """The server refused a request; ``status`` is the HTTP status (404, 409, 400, ...)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Client:
    def __init__(self, base_url: str = "http://127.0.0.1:8010", *, model: str = "policy", api_key: str | None = None,
                 timeout: float = 300.0):
        import httpx

        root = base_url.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model
        self._http = httpx.Client(base_url=root, headers=headers, timeout=timeout)

    @staticmethod
    def new_session() -> str:
        """A fresh session id: use one per episode."""
        return uuid.uuid4().hex

    def chat(self, messages: list[dict], *, session_id: str, **params: Any) -> dict[str, Any]:
        """One chat turn of ``session_id``; ``params`` are OpenAI's (max_tokens, temperature, n, tools, ...)."""
        body = {"model": self.model, "messages": messages, **params}
        return self._post("/v1/chat/completions", body, headers={SESSION_HEADER: session_id})

    def feedback(self, session_id: str, reward: float, *, group_id: str | None = None,
                 info: dict[str, Any] | None = None) -> dict[str, Any]:
        """The session's reward; ``group_id`` puts sessions of one task in one group (group baselines)."""
        body: dict[str, Any] = {"session_id": session_id, "reward": reward}
        if group_id is not None:
            body["group_id"] = group_id
        if info:
            body["info"] = info
        return self._post("/feedback", body)

    def commit(self) -> dict[str, Any]:
        """Write every rewarded session to the run's buffer: ``{"sessions", "experiences", "model_version"}``."""
        return self._post("/commit", {})

    def model_version(self) -> int:
        """The version of the weights served now (0 before the first sync)."""
        response = self._http.get("/health")
        _raise_for_refusal(response)
        return int(response.json()["model_version"])

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
        response = self._http.post(path, json=body, headers=headers)
        _raise_for_refusal(response)
        return response.json()


def _raise_for_refusal(response: Any) -> None:
    if response.status_code < 400:
        return
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text
    raise ServeError(response.status_code, message)
