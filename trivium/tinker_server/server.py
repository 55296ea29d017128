"""Running the Tinker API server: in the foreground (the CLI) or in a thread (tests, notebooks)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trivium.errors import UserError
from trivium.models.model_dir import check_model_dir
from trivium.models.server import check_port_free, free_port
from trivium.models.server_guard import exposure_warning
from trivium.models.server_transport import app_in_thread
from trivium.tinker_server.app import create_app
from trivium.tinker_server.state import ServerOptions, TinkerState

DEFAULT_MAX_REQUEST_BYTES = 64 * 2**20


def base_models(specs: list[str]) -> dict[str, str]:
    """``--model`` values (``PATH`` or ``NAME=PATH``) as {name the SDK sends: model directory}.

    A bare path is served under the path as given and under its directory name.
    """
    if not specs:
        raise UserError("serve-tinker needs a base model: --model PATH (or NAME=PATH, repeatable)")
    served: dict[str, str] = {}
    for spec in specs:
        name, _, path = spec.rpartition("=") if "=" in spec else (None, "", spec)
        directory = str(check_model_dir(path, key="--model", needs_tokenizer=True).resolve())
        for alias in [name] if name else [path, Path(path).name]:
            if alias in served and served[alias] != directory:
                raise UserError(f"--model: the name {alias!r} is given to two directories; use NAME=PATH")
            served[alias] = directory
    return served


def build_state(models: list[str], checkpoint_dir: str) -> TinkerState:
    return TinkerState(
        ServerOptions(base_models=base_models(models), checkpoint_root=Path(checkpoint_dir).resolve())
    )


def serve(
    state: TinkerState,
    *,
    host: str,
    port: int,
    api_key: str | None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Serve until interrupted; blocks."""
    import uvicorn

    check_port_free(host, port)
    warning = exposure_warning(host, api_key)
    if warning:
        print(f"warning: {warning.replace('the model server', 'the Tinker server')}", file=sys.stderr)
    uvicorn.run(
        create_app(state, api_key=api_key, max_request_bytes=max_request_bytes),
        host=host,
        port=port,
        log_level="warning",
    )


@contextmanager
def serve_in_thread(
    state: TinkerState,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    api_key: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    startup_timeout: float = 30.0,
) -> Iterator[str]:
    """Serve from a background thread for the ``with`` block; yields the base URL for ``ServiceClient``."""
    port = port or free_port(host)
    app = create_app(state, api_key=api_key, max_request_bytes=max_request_bytes)
    try:
        with app_in_thread(app, host=host, port=port, what="Tinker server", startup_timeout=startup_timeout):
            yield f"http://{host}:{port}"
    finally:
        state.jobs.stop()
