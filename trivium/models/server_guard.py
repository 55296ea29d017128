"""What the model server refuses before any work is done, and how it says so.

Owns the server's limits (``ServerLimits``: request size, samples per request, prompts per
request), the optional API key check, the checks of a chat request's messages, the HTTP
errors the handlers raise (each with its status code and an OpenAI-style error body), and
the warning printed when the server listens beyond loopback.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from trivium.errors import UserError

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class ServerLimits:
    max_request_bytes: int = 4 * 2**20  # 4 MiB of JSON: long token-id prompts fit, a runaway upload does not
    max_n: int = 16  # samples per prompt
    max_prompts: int = 64  # prompts in one completions or generate request


class HTTPProblem(UserError):
    """A request refused with ``status``; the body follows the OpenAI error shape."""

    status = 400
    error_type = "invalid_request_error"
    code: str | None = None
    param: str | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.error_type, "param": self.param, "code": self.code}}


class BadRequest(HTTPProblem):
    """A request the server cannot serve (HTTP 400)."""


class Unauthorized(HTTPProblem):
    status = 401
    code = "invalid_api_key"


class ModelNotFound(HTTPProblem):
    status = 404
    code = "model_not_found"
    param = "model"


class RequestTooLarge(HTTPProblem):
    status = 413


def check_api_key(authorization: str | None, api_key: str | None) -> None:
    """Nothing to check without a key; else the request must carry ``Authorization: Bearer <key>``."""
    if api_key is None:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), api_key.encode()):
        raise Unauthorized("missing or wrong API key; send the header `Authorization: Bearer <key>`")


def check_request_size(size: int, limits: ServerLimits) -> None:
    if size > limits.max_request_bytes:
        raise RequestTooLarge(
            f"the request body is {size} bytes, over this server's limit of {limits.max_request_bytes} "
            "(--max-request-bytes)"
        )


def check_model_name(requested: Any, served: str) -> None:
    """OpenAI answers 404 for a model it does not serve; a request without ``model`` is served."""
    if requested is not None and requested != served:
        raise ModelNotFound(f"the model `{requested}` does not exist; this server serves `{served}`")


def check_samples(*, prompts: int, n: int, limits: ServerLimits) -> None:
    if n > limits.max_n:
        raise BadRequest(f"n={n} is over this server's limit of {limits.max_n} samples per prompt (--max-n)")
    if prompts > limits.max_prompts:
        raise BadRequest(f"{prompts} prompts in one request is over this server's limit of {limits.max_prompts}")


def check_messages(messages: Any) -> None:
    """A chat request's ``messages``: a non-empty list of {role, content} with known roles."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("`messages` must be a non-empty list of {role, content} objects")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"messages[{index}] must be an object with 'role' and 'content', got {type(message).__name__}")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise BadRequest(f"messages[{index}].role is {role!r}; it must be one of {', '.join(CHAT_ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise BadRequest(f"messages[{index}].content must be a string or a list of parts, got {type(content).__name__}")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """A warning when ``host`` is reachable from other machines; None on loopback."""
    if is_loopback(host):
        return None
    everyone = "every network interface" if host in ("0.0.0.0", "::") else host
    guard = "requests need the API key" if api_key else "anyone who can reach this machine can use the model; set --api-key"
    return f"the model server listens on {everyone}, not only on this machine: {guard}"
