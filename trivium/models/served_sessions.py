"""Serve mode's sessions: outside applications' chats recorded token-exactly, rewarded, committed.

Owns the life of a session, named by the ``X-Session-Id`` header its chat requests carry:

    open (chat turns recorded) -> rewarded (POST /feedback) -> committed (POST /commit)

Each turn is sampled through the rollout model's ``ModelWrapper``, so a conversation sent back
with the model's reply and new messages continues the exact token sequence the model produced
(``trivium/models/conversation.py``): a multi-turn session is one experience per branch, its
model tokens trained and the environment's not. A turn that continues a recorded branch
replaces it. ``commit`` gives every rewarded session's branches the session's reward, makes
them ready for training (group advantages, the experience pipeline) and writes them to the
run's experience buffer.

Knows nothing about HTTP beyond the errors it raises (400 a reward that fails the rule every
reward passes, ``trivium.core.reward_check``; 404 unknown session, 409 out of order, 503 after
the run stopped taking commits); the server in ``trivium.models.server`` calls it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from trivium.core.experience import Experience
from trivium.core.reward_check import MAX_ABS_REWARD, reward_problem
from trivium.models.openai_client import last_turn
from trivium.models.server_guard import BadRequest, HTTPProblem

logger = logging.getLogger("trivium.serve")

MAX_SESSION_ID_CHARS = 200
# Committed session ids remembered to answer a late feedback with 409; older ones get 404.
REMEMBERED_COMMITTED_IDS = 100_000


class SessionNotFound(HTTPProblem):
    status = 404
    code = "session_not_found"
    param = "session_id"


class SessionConflict(HTTPProblem):
    status = 409
    code = "session_conflict"
    param = "session_id"


class NotTakingCommits(HTTPProblem):
    status = 503
    error_type = "service_unavailable"


@dataclass(frozen=True)
class ServedTurn:
    """One sampled reply of a recorded chat request, as the server answers it."""

    content: str
    tool_calls: list[dict] | None
    reasoning_content: str | None
    finish_reason: str
    token_ids: list[int]  # this turn's sampled ids
    logprobs: list[float]  # the engine's logprob of each
    prompt_token_ids: list[int]  # the episode before this turn, as the model saw it
    model_version: int

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass
class Session:
    session_id: str
    wrapper: Any  # the ModelWrapper whose conversations this session continues
    branches: list[Experience] = field(default_factory=list)
    reward: float | None = None
    group_id: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def rewarded(self) -> bool:
        return self.reward is not None

    def record(self, experience: Experience) -> None:
        """Keep ``experience``; a recorded branch it continues (a prefix of its tokens) is replaced."""
        self.branches = [b for b in self.branches if not _is_prefix(b.tokens, experience.tokens)]
        self.branches.append(experience)


@dataclass(frozen=True)
class CommitResult:
    experiences: list[Experience]
    sessions: int
    metrics: dict[str, float]


class SessionRecorder:
    """The sessions of one served policy: ``chat``, ``feedback`` and ``commit``, safe from many threads.

    ``write(experiences)`` puts committed experiences in the buffer; ``prepare(experiences)``
    returns them ready for training with its metrics; ``on_commit(result)`` is told of every
    commit that wrote something (the loop logs it and counts it as an explorer step).
    """

    takes_feedback = True  # the server adds /feedback and /commit

    def __init__(
        self,
        *,
        wrappers: list[Any],
        write: Callable[[list[Experience]], None],
        prepare: Callable[[list[Experience]], tuple[list[Experience], dict[str, float]]] | None = None,
        on_commit: Callable[[CommitResult], None] | None = None,
        version: Callable[[], int] | None = None,
    ):
        if not wrappers:
            raise ValueError("a session recorder needs at least one model wrapper")
        self.wrappers = list(wrappers)
        self.write = write
        self.prepare = prepare or (lambda experiences: (experiences, {}))
        self.on_commit = on_commit
        self.version = version or wrappers[0].engine.version
        self._sessions: dict[str, Session] = {}
        self._committed: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()  # the session table
        self._commit_lock = threading.Lock()  # one commit at a time, in order
        self._next_wrapper = itertools.count()
        self._commits = 0
        self._closed = False

    # ------------------------------------------------------------------ chat
    def chat(
        self, session_id: str, messages: list[dict], *, tools: list[dict] | None, n: int, rollout_args: dict[str, Any],
        enable_thinking: bool | None = None,
    ) -> list[ServedTurn]:
        """Sample ``n`` replies for ``session_id`` and record them."""
        check_session_id(session_id)
        with self._lock:
            self._refuse_if_final(session_id)
            session = self._sessions.get(session_id)
            wrapper = session.wrapper if session is not None else self._pick_wrapper()
        turns = wrapper.chat_turns(messages, n, tools=tools, enable_thinking=enable_thinking, **rollout_args)
        with self._lock:
            self._refuse_if_final(session_id)
            session = self._sessions.setdefault(session_id, Session(session_id, wrapper))
            for experience, _ in turns:
                session.record(experience)
        return [served_turn(experience, message) for experience, message in turns]

    def _refuse_if_final(self, session_id: str) -> None:
        if session_id in self._committed:
            raise SessionConflict(f"session {session_id!r} was committed already; start a new session id")
        session = self._sessions.get(session_id)
        if session is not None and session.rewarded:
            raise SessionConflict(
                f"session {session_id!r} got its reward already; its turns are final, start a new session id"
            )

    def _pick_wrapper(self) -> Any:
        # A new session gets a view of one wrapper (in turn) with conversations of its own: it stays
        # with that wrapper's engine (in serve mode, its home engine in the pool, which hands a turn
        # to another engine while the home loads weights; the view keeps the exact tokens either way),
        # and its turns continue only its own conversations, never another session's equal one (so
        # each session's record is replaced by its own later turns only).
        return self.wrappers[next(self._next_wrapper) % len(self.wrappers)].for_workflow()

    # ------------------------------------------------------------------ feedback
    def feedback(self, body: dict[str, Any]) -> dict[str, Any]:
        """Record a session's reward (and optional ``group_id`` and ``info``); once per session."""
        session_id, reward = body.get("session_id"), body.get("reward")
        check_session_id(session_id)
        problem = reward_problem(reward)
        if problem:
            raise BadRequest(
                f"`reward` must be a finite number within ±{MAX_ABS_REWARD:g} (the rule every reward passes); "
                f"got {reward!r}: {problem}"
            )
        group_id, info = body.get("group_id"), body.get("info") or {}
        if group_id is not None and not isinstance(group_id, str):
            raise BadRequest(f"`group_id` must be a string, got {group_id!r}")
        if not isinstance(info, dict):
            raise BadRequest(f"`info` must be an object, got {type(info).__name__}")
        unknown = sorted(set(body) - {"session_id", "reward", "group_id", "info"})
        if unknown:
            raise BadRequest(f"unknown field(s) {unknown}; /feedback takes session_id, reward, group_id, info")
        with self._lock:
            if session_id in self._committed:
                raise SessionConflict(f"session {session_id!r} was committed already; feedback is taken once")
            session = self._sessions.get(session_id)
            if session is None:
                raise SessionNotFound(
                    f"unknown session id {session_id!r}: no chat completion was recorded with the header "
                    f"X-Session-Id: {session_id}"
                )
            if session.rewarded:
                raise SessionConflict(
                    f"session {session_id!r} already has reward {session.reward}; feedback is taken once"
                )
            session.reward, session.group_id, session.info = float(reward), group_id, dict(info)
            branches = len(session.branches)
        return {"session_id": session_id, "reward": float(reward), "experiences": branches,
                "model_version": self.version()}

    # ------------------------------------------------------------------ commit
    def commit(self) -> dict[str, Any]:
        """Turn every rewarded session into experiences and write them to the buffer."""
        with self._commit_lock:
            with self._lock:
                if self._closed:
                    raise NotTakingCommits("the run has stopped taking commits (it is ending)")
                rewarded = [s for s in self._sessions.values() if s.rewarded]
                for session in rewarded:
                    del self._sessions[session.session_id]
                    self._committed[session.session_id] = None
                while len(self._committed) > REMEMBERED_COMMITTED_IDS:
                    self._committed.popitem(last=False)
            if not rewarded:
                return {"sessions": 0, "experiences": 0, "model_version": self.version()}
            self._commits += 1
            experiences = experiences_of(rewarded, default_group=f"commit-{self._commits}")
            experiences, metrics = self.prepare(experiences)
            if experiences:
                self.write(experiences)
            result = CommitResult(experiences, len(rewarded), commit_metrics(rewarded, experiences, metrics))
            if self.on_commit is not None:
                self.on_commit(result)
        logger.info("committed %d sessions as %d experiences", len(rewarded), len(experiences))
        return {"sessions": len(rewarded), "experiences": len(experiences), "model_version": self.version()}

    # ------------------------------------------------------------------ the end
    def close(self) -> dict[str, int]:
        """Take no more commits; returns the sessions left behind (open, and rewarded but not committed)."""
        with self._commit_lock, self._lock:
            self._closed = True
            rewarded = sum(s.rewarded for s in self._sessions.values())
            return {"open": len(self._sessions) - rewarded, "rewarded": rewarded}


def experiences_of(sessions: list[Session], *, default_group: str) -> list[Experience]:
    """Every branch of every session with the session's reward; sessions without a ``group_id``
    share ``default_group`` (their group baseline is the commit's mean reward)."""
    experiences = []
    for session in sessions:
        for run_id, experience in enumerate(session.branches):
            experience.reward = session.reward
            experience.group_id = session.group_id or default_group
            experience.task_id = session.session_id
            experience.run_id = run_id
            experience.info = {**experience.info, "session_id": session.session_id, **(
                {"feedback": session.info} if session.info else {})}
            experiences.append(experience)
    return experiences


def commit_metrics(
    sessions: list[Session], experiences: list[Experience], pipeline: dict[str, float]
) -> dict[str, float]:
    rewards = [s.reward for s in sessions]
    lengths = [int(e.action_mask.sum()) for e in experiences]
    metrics = {
        "serve/sessions": float(len(sessions)),
        "serve/experiences": float(len(experiences)),
        "rollout/reward_mean": sum(rewards) / len(rewards),
        "rollout/reward_max": max(rewards),
        "rollout/reward_min": min(rewards),
    }
    if lengths:
        metrics["rollout/response_length_mean"] = sum(lengths) / len(lengths)
    metrics.update({f"pipeline/{key}": value for key, value in pipeline.items()})
    return metrics


def check_session_id(session_id: Any) -> None:
    if not isinstance(session_id, str) or not session_id.strip():
        raise BadRequest(f"a session id must be a non-empty string, got {session_id!r}")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise BadRequest(f"a session id has at most {MAX_SESSION_ID_CHARS} characters, got {len(session_id)}")


def served_turn(experience: Experience, message: dict) -> ServedTurn:
    """A sampled turn (the wrapper's experience and assistant message) as the server answers it."""
    ids, logprobs = last_turn(experience)
    return ServedTurn(
        content=message.get("content") or "",
        tool_calls=message.get("tool_calls"),
        reasoning_content=message.get("reasoning_content"),
        finish_reason=experience.info.get("finish_reason", "stop"),
        token_ids=ids,
        logprobs=logprobs,
        prompt_token_ids=experience.tokens[: experience.tokens.numel() - len(ids)].tolist(),
        model_version=experience.model_version,
    )


def _is_prefix(shorter: torch.Tensor, longer: torch.Tensor) -> bool:
    return shorter.numel() <= longer.numel() and torch.equal(longer[: shorter.numel()], shorter)
