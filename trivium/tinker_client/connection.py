"""The Tinker service as trivium reaches it: one ``ServiceClient``, every call bounded.

The SDK reads ``TINKER_API_KEY`` and ``TINKER_BASE_URL`` from the environment; trivium never
takes either from a config file. ``submit``, ``wait`` and ``call`` bound every call in time
(the SDK itself may retry an unreachable service for minutes) and turn the service's failures
(a refused key, a quota, an unreachable server, a lost or timed-out future) into
``TinkerServiceError``, whose message names the call and what to check.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from trivium.errors import UserError

ENV_KEY, ENV_URL = "TINKER_API_KEY", "TINKER_BASE_URL"
T = TypeVar("T")


class TinkerServiceError(UserError):
    """A call to the Tinker service failed; the run cannot go on without it."""


def service_client() -> Any:
    """A ``tinker.ServiceClient`` for the service the environment names."""
    try:
        import tinker
    except ImportError:
        raise UserError("model.tinker.enable needs the Tinker SDK: pip install tinker") from None
    if not os.environ.get(ENV_KEY):
        raise UserError(f"model.tinker.enable: set the environment variable {ENV_KEY} to your Tinker API key")
    try:
        return tinker.ServiceClient()
    except Exception as error:  # the SDK checks the key's shape and the URL when it starts
        raise TinkerServiceError(f"could not start the Tinker client: {describe(error)}") from error


def submit(start: Callable[[], T], what: str, timeout: float) -> T:
    """``start()`` (an SDK call that returns a future or a client), bounded by ``timeout``.

    The SDK may block inside the call itself (it opens a session and retries an unreachable
    service for minutes), so the call runs in a daemon thread that is left behind on timeout.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = start()
        except Exception as error:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = error
        finally:
            done.set()

    threading.Thread(target=run, name="tinker-call", daemon=True).start()
    if not done.wait(timeout):
        raise TinkerServiceError(_too_slow(what, timeout))
    if "error" in box:
        error = box["error"]
        if isinstance(error, UserError):
            raise error
        raise TinkerServiceError(f"the Tinker service failed {what}: {describe(error)}") from error
    return box["value"]


def wait(future: Any, what: str, timeout: float) -> Any:
    """The result of an SDK future, or a ``TinkerServiceError`` naming ``what`` failed and why."""
    try:
        return future.result(timeout=timeout)
    except TimeoutError as error:
        raise TinkerServiceError(_too_slow(what, timeout)) from error
    except UserError:
        raise
    except Exception as error:
        raise TinkerServiceError(f"the Tinker service failed {what}: {describe(error)}") from error


def call(start: Callable[[], Any], what: str, timeout: float) -> Any:
    """Start an SDK call and wait for its result, each part bounded by ``timeout``."""
    return wait(submit(start, what, timeout), what, timeout)


def _too_slow(what: str, timeout: float) -> str:
    return (
        f"the Tinker service did not finish {what} within {timeout:.0f}s (synchronizer.sync_timeout); "
        f"is it reachable at {ENV_URL}={os.environ.get(ENV_URL, '(unset)')}?"
    )


def describe(error: BaseException) -> str:
    """The SDK's error as a user reads it: its kind, what to check, the server's words."""
    import tinker

    hints = [
        (tinker.AuthenticationError, f"the service refused the API key (check {ENV_KEY})"),
        (tinker.PermissionDeniedError, f"the API key may not do this (check {ENV_KEY})"),
        (tinker.RateLimitError, "the service's rate limit or quota is exhausted; wait or raise the quota"),
        (tinker.APITimeoutError, f"the request timed out (is {ENV_URL} reachable?)"),
        (tinker.APIConnectionError, f"the service cannot be reached (check {ENV_URL})"),
        (tinker.NotFoundError, "the service does not know this model, checkpoint or future"),
        (tinker.BadRequestError, "the service refused the request"),
        (tinker.InternalServerError, "the service failed internally"),
    ]
    for kind, hint in hints:
        if isinstance(error, kind):
            return f"{hint}: {_message(error)}"
    return f"{type(error).__name__}: {_message(error)}"


def _message(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text if len(text) <= 400 else text[:400] + " ..."
