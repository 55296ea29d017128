"""OpenAI-compatible HTTP endpoints of the explorer's models, for workflows (``enable_openai_api``).

Agent frameworks talk to a model through an OpenAI client built from a base URL. For each
model wrapper whose settings ask for it (the rollout model's, an auxiliary model's), the
explorer serves its engine over HTTP (``trivium.models.server``: FastAPI + uvicorn, on
``explorer.listen_address``, a free port) for the whole run.

Every workflow gets its own view of the wrapper (``ModelWrapper.for_workflow``) and, on that
view, a base URL naming a session of its own: ``http://<address>:<port>/sessions/<id>/v1``.
Requests under it are served by that view, so they go through the same chat template,
batches and token-exact conversations as ``model.chat``, and with ``enable_history`` they
land in that workflow's history, which ``extract_experience_from_history`` returns. Several
workflows running at once never see each other's calls, nor continue each other's
conversations when they say the same thing (each view remembers its own). Requests to the plain ``/v1`` are
served by the engine and recorded nowhere. A session ends with its workflow (views are held
weakly); a later request to it gets 404.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
import weakref
from typing import Any

from trivium.models.served_sessions import ServedTurn, SessionNotFound, served_turn
from trivium.models.server import serve_in_thread


class WorkflowSessions:
    """The running workflows' views of one wrapper, by session id; the server's session recorder."""

    takes_feedback = False  # rewards come from the workflow itself, not from /feedback

    def __init__(self) -> None:
        self._views: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def open(self, view: Any) -> str:
        session_id = uuid.uuid4().hex
        with self._lock:
            self._views[session_id] = view
        return session_id

    def chat(
        self, session_id: str, messages: list[dict], *, tools: list[dict] | None, n: int, rollout_args: dict[str, Any],
        enable_thinking: bool | None = None,
    ) -> list[ServedTurn]:
        with self._lock:
            view = self._views.get(session_id)
        if view is None:
            raise SessionNotFound(f"no running workflow has session {session_id!r}; it ended, or the id is wrong")
        turns = view.chat_turns(messages, n, tools=tools, enable_thinking=enable_thinking, **rollout_args)
        return [served_turn(experience, message) for experience, message in turns]


class WorkflowApi:
    """Serves the wrappers that ask for it; ``bind`` gives a workflow's view its session URL."""

    def __init__(self, wrappers: list[Any], *, host: str, api_key: str | None = None):
        self._stack = contextlib.ExitStack()
        self._served: dict[int, tuple[str, WorkflowSessions]] = {}
        self.api_key = api_key
        try:
            for wrapper in wrappers:
                sessions = WorkflowSessions()
                base_url = self._stack.enter_context(serve_in_thread(
                    wrapper.engine, host=host, model_name=wrapper.openai_model_name, api_key=api_key,
                    sessions=sessions,
                ))
                self._served[id(wrapper)] = (base_url.removesuffix("/v1"), sessions)
        except BaseException:
            self._stack.close()
            raise

    @property
    def urls(self) -> list[str]:
        """The plain ``/v1`` base URL of each served model."""
        return [f"{root}/v1" for root, _ in self._served.values()]

    def bind(self, wrapper: Any, view: Any) -> Any:
        """``view`` (of ``wrapper``) with a session and its base URL, when ``wrapper`` is served."""
        served = self._served.get(id(wrapper))
        if served is not None:
            root, sessions = served
            view.openai_base_url = f"{root}/sessions/{sessions.open(view)}/v1"
            view.openai_api_key = self.api_key
        return view

    def close(self) -> None:
        self._stack.close()
