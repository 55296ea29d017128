"""What sits between a socket and the model server's app: the ports it listens on, a server
run in a background thread, and the middleware that reads a session named in the path
(``/sessions/<id>/v1/...``)."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trivium.errors import UserError

SESSION_HEADER = "X-Session-Id"


def check_port_free(host: str, port: int, *, key: str = "--port") -> None:
    """A clear error naming ``key`` when ``host:port`` cannot be listened on."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise UserError(f"cannot listen on {host}:{port} ({error.strerror}); choose another {key}") from None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@contextmanager
def app_in_thread(app: Any, *, host: str, port: int, what: str, startup_timeout: float) -> Iterator[None]:
    """Serve the ASGI ``app`` with uvicorn from a daemon thread for the ``with`` block.

    Waits until the server listens (a ``RuntimeError`` naming ``what`` after ``startup_timeout``
    seconds or when the thread dies first) and stops it when the block ends.
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread_name = "trivium-" + what.lower().replace(" ", "-")
    thread = threading.Thread(target=server.run, name=thread_name, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the {what} did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class SessionPathPrefix:
    """ASGI middleware: ``/sessions/<id>/v1/...`` is served as ``/v1/...`` with ``X-Session-Id: <id>``."""

    PATTERN = re.compile(r"^/sessions/([A-Za-z0-9_.:-]{1,200})(/v1/.*)$")

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            match = self.PATTERN.match(scope["path"])
            if match:
                session_id, path = match.groups()
                header = SESSION_HEADER.lower().encode()
                headers = [(name, value) for name, value in scope["headers"] if name.lower() != header]
                scope = dict(scope, path=path, raw_path=path.encode(), headers=[*headers, (header, session_id.encode())])
        await self.app(scope, receive, send)
