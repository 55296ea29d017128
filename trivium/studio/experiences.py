"""A run's buffered experiences, for the experience browser: filtered, and split token by token.

Owns finding where a run keeps its experiences (from ``config.resolved.yaml``: a ``sql``
buffer, or a ``queue`` mirrored to SQL or to a ``.jsonl`` file), reading them without
writing (SQLite files are opened read-only), and turning one experience into segments a page
can draw: the prompt, then the response cut where the action mask changes, so the tokens the
trainer learns from (mask 1, the model's turns) stand apart from the tokens the environment
inserted (mask 0, tool results or user turns of a multi-turn episode). Each model token
carries the engine's logprob. A multi-turn episode also lists its recorded ``turns`` (role,
text, trained or not; ``trivium/core/episode_turns.py``), which need no tokenizer.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trivium.buffer.codec import experience_from_json, row_to_experience
from trivium.core.episode_turns import TURNS_KEY
from trivium.core.experience import Experience
from trivium.core.storage_kinds import kinds_with, storage_kind
from trivium.errors import UserError

MAX_LIMIT = 200


@dataclass(frozen=True)
class BufferLocation:
    kind: str  # "sql" (a database URL) or "jsonl" (a queue's mirror file)
    location: str
    buffer_name: str


@dataclass(frozen=True)
class ExperienceFilter:
    min_step: int | None = None  # the explorer step that produced the experience
    max_step: int | None = None
    min_version: int | None = None
    max_version: int | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    task: str | None = None  # a part of the task id (which starts with the taskset name)


def buffer_location(config: dict, *, working_dir: Path) -> BufferLocation:
    """Where the run of ``config`` (a resolved config as plain data) keeps its experiences.

    A UserError says why when it keeps none on disk (an unmirrored queue, a file buffer).
    """
    buffer = ((config.get("buffer") or {}).get("trainer_input") or {}).get("experience_buffer") or {}
    storage_type, path, name = buffer.get("storage_type"), buffer.get("path"), buffer.get("name") or ""
    kept = storage_kind(storage_type, key="buffer.trainer_input.experience_buffer").keeps_experiences
    if kept is None:
        browsable = " and ".join(kinds_with("keeps_experiences"))
        raise UserError(f"the experience buffer is a {storage_type!r} storage; only {browsable} buffers are browsable")
    if not path:
        raise UserError(
            f"the experience buffer is a {storage_type} without a `path`, so its experiences were kept in memory "
            "only; give buffer.trainer_input.experience_buffer.path (a .db file) to browse them"
        )
    path = str(path)
    if "://" in path:
        return BufferLocation("sql", path, name)
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = working_dir / file
    if not file.exists():
        raise UserError(f"no experiences yet: {file} does not exist")
    kind = "jsonl" if kept == "mirror" and file.suffix == ".jsonl" else "sql"
    return BufferLocation(kind, str(file), name)


def read_experiences(
    location: BufferLocation, selection: ExperienceFilter, *, limit: int = 20, offset: int = 0
) -> tuple[int, list[tuple[int, Experience]]]:
    """(how many match, one page of (row number, experience)), in the order they were written."""
    limit = max(0, min(limit, MAX_LIMIT))
    if location.kind == "jsonl":
        matching = [
            (number, experience)
            for number, experience in _jsonl_experiences(location.location)
            if _matches(experience, selection)
        ]
        return len(matching), matching[offset : offset + limit]
    return _sql_experiences(location, selection, limit=limit, offset=offset)


def _matches(experience: Experience, selection: ExperienceFilter) -> bool:
    step, version, reward = experience.explore_step, experience.model_version, experience.reward
    if selection.min_step is not None and step < selection.min_step:
        return False
    if selection.max_step is not None and step > selection.max_step:
        return False
    if selection.min_version is not None and version < selection.min_version:
        return False
    if selection.max_version is not None and version > selection.max_version:
        return False
    if selection.min_reward is not None and (reward is None or reward < selection.min_reward):
        return False
    if selection.max_reward is not None and (reward is None or reward > selection.max_reward):
        return False
    return not selection.task or selection.task in experience.task_id


def _jsonl_experiences(path: str) -> list[tuple[int, Experience]]:
    found = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash, or one being written right now
            if isinstance(record, dict) and "written" in record:
                found.append((number, experience_from_json(record["written"])))
    return found


def _sql_experiences(
    location: BufferLocation, selection: ExperienceFilter, *, limit: int, offset: int
) -> tuple[int, list[tuple[int, Experience]]]:
    from sqlalchemy import func, select
    from sqlalchemy.exc import DatabaseError
    from sqlalchemy.orm import Session

    from trivium.buffer.codec import STORED_IN_INFO
    from trivium.buffer.sql_schema import ExperienceModel as Row

    conditions = [Row.buffer == location.buffer_name] if location.buffer_name else []
    # The explorer step is kept in the row's info (absent, i.e. 0, in rows written before it existed).
    step = func.coalesce(Row.info[STORED_IN_INFO["explore_step"]].as_integer(), 0)
    if selection.min_step is not None:
        conditions.append(step >= selection.min_step)
    if selection.max_step is not None:
        conditions.append(step <= selection.max_step)
    if selection.min_version is not None:
        conditions.append(Row.model_version >= selection.min_version)
    if selection.max_version is not None:
        conditions.append(Row.model_version <= selection.max_version)
    if selection.min_reward is not None:
        conditions.append(Row.reward >= selection.min_reward)
    if selection.max_reward is not None:
        conditions.append(Row.reward <= selection.max_reward)
    if selection.task:
        conditions.append(Row.task_id.contains(selection.task, autoescape=True))
    try:
        with Session(_read_only_engine(location.location)) as session:
            total = session.execute(select(func.count()).select_from(Row).where(*conditions)).scalar_one()
            rows = session.execute(
                select(Row).where(*conditions).order_by(Row.id).offset(offset).limit(limit)
            )
            return total, [(row.id, row_to_experience(row)) for row in rows.scalars()]
    except DatabaseError as error:
        raise UserError(
            f"cannot read experiences from {location.location}: {str(error).splitlines()[0]}"
        ) from None


@functools.lru_cache(maxsize=16)
def _read_only_engine(location: str):
    from sqlalchemy import create_engine

    if "://" in location:
        return create_engine(location)
    return create_engine(f"sqlite:///file:{Path(location).resolve()}?mode=ro&uri=true")


# ---- one experience, as a page draws it -----------------------------------------------------


@functools.lru_cache(maxsize=4)
def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def experience_view(number: int, experience: Experience, tokenizer: Any | None) -> dict[str, Any]:
    """An experience as JSON: its fields, ``turns`` (a multi-turn episode's messages: ``role``,
    ``text``, ``trained``; empty for a single turn) and ``segments`` (``role``
    prompt/model/environment, tokens).

    Without a tokenizer the segments are empty and the page shows the stored texts.
    """
    return {
        "number": number,
        "eid": experience.eid,
        "task_id": experience.task_id,
        "group_id": experience.group_id,
        "repeat": experience.run_id,
        "explore_step": experience.explore_step,
        "model_version": experience.model_version,
        "reward": experience.reward,
        "prompt_text": experience.prompt_text,
        "response_text": experience.response_text,
        "prompt_length": experience.prompt_length,
        "prompt_truncated": experience.prompt_truncated,
        "response_length": experience.response_length,
        "trained_tokens": int(experience.action_mask.sum()) if experience.action_mask is not None else None,
        "info": experience.info,
        "metrics": experience.metrics,
        "turns": [
            {"role": turn["role"], "text": turn["text"], "trained": bool(turn["trained"])}
            for turn in experience.info.get(TURNS_KEY) or []
        ],
        "segments": token_segments(experience, tokenizer) if tokenizer is not None else [],
    }


def token_segments(experience: Experience, tokenizer: Any) -> list[dict[str, Any]]:
    """The prompt, then runs of response tokens with the same action mask: ``[{role, tokens}]``.

    ``tokens`` are ``{"text", "id", "logprob"}`` (logprob only for trained tokens).
    """
    ids = experience.tokens.tolist()
    segments = [
        {
            "role": "prompt",
            "tokens": [_token(tokenizer, token_id, None) for token_id in ids[: experience.prompt_length]],
        }
    ]
    mask = experience.action_mask.tolist()
    logprobs = experience.logprobs.tolist() if experience.logprobs is not None else [None] * len(mask)
    for position, token_id in enumerate(ids[experience.prompt_length :]):
        trained = bool(mask[position]) if position < len(mask) else False
        role = "model" if trained else "environment"
        if segments[-1]["role"] != role or len(segments) == 1:
            segments.append({"role": role, "tokens": []})
        logprob = logprobs[position] if trained and position < len(logprobs) else None
        segments[-1]["tokens"].append(_token(tokenizer, token_id, logprob))
    return segments


def _token(tokenizer: Any, token_id: int, logprob: float | None) -> dict[str, Any]:
    return {"id": token_id, "text": tokenizer.decode([token_id]), "logprob": logprob}
