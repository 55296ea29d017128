"""What sits between a socket and the model server's app: the ports it listens on, and the
middleware that reads a session named in the path (``/sessions/<id>/v1/...``)."""

from __future__ import annotations

import re
import socket

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
