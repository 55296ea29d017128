"""Compact encodings of an Experience: binary columns for SQL, one JSON line for files.

Owns the byte layout of stored tensors (tokens int32, logprobs/advantages/returns float32,
action_mask uint8, all little-endian). Changing it breaks databases already written.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from trivium.core.experience import Experience
from trivium.core.sampling_mask import SamplingMask


def pack_ints(values: torch.Tensor) -> bytes:
    return values.to(torch.int32).numpy().astype("<i4", copy=False).tobytes()


def pack_floats(values: torch.Tensor | None) -> bytes | None:
    if values is None:
        return None
    return values.to(torch.float32).numpy().astype("<f4", copy=False).tobytes()


def pack_mask(values: torch.Tensor) -> bytes:
    return values.to(torch.uint8).numpy().tobytes()


def unpack_ints(blob: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(blob, dtype="<i4").astype(np.int64))


def unpack_floats(blob: bytes | None) -> torch.Tensor | None:
    if blob is None:
        return None
    return torch.from_numpy(np.frombuffer(blob, dtype="<f4").copy())


def unpack_mask(blob: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(blob, dtype=np.uint8).astype(bool))


# Fields added after the table layout was fixed travel in the JSON ``info`` column under
# these keys, so databases written before them stay readable; they never reach Experience.info.
STORED_IN_INFO = {
    "teacher_logprobs": "_teacher_logprobs",
    "baseline_reward": "_baseline_reward",
    "is_expert": "_is_expert",
    "explore_step": "_explore_step",
    "sampling_mask": "_sampling_mask",
}


def _info_with_extra_fields(experience: Experience) -> dict[str, Any]:
    info = dict(experience.info or {})
    if experience.teacher_logprobs is not None:
        info[STORED_IN_INFO["teacher_logprobs"]] = experience.teacher_logprobs.tolist()
    if experience.baseline_reward is not None:
        info[STORED_IN_INFO["baseline_reward"]] = experience.baseline_reward
    if experience.is_expert:
        info[STORED_IN_INFO["is_expert"]] = True
    if experience.explore_step:
        info[STORED_IN_INFO["explore_step"]] = experience.explore_step
    if experience.sampling_mask is not None:
        info[STORED_IN_INFO["sampling_mask"]] = experience.sampling_mask.to_dict()
    return info


def _extra_fields_from_info(info: dict[str, Any]) -> dict[str, Any]:
    """Pops the stored extra fields out of ``info``; returns them as Experience keywords."""
    teacher = info.pop(STORED_IN_INFO["teacher_logprobs"], None)
    sampling_mask = info.pop(STORED_IN_INFO["sampling_mask"], None)
    return {
        "teacher_logprobs": None if teacher is None else torch.tensor(teacher, dtype=torch.float32),
        "baseline_reward": info.pop(STORED_IN_INFO["baseline_reward"], None),
        "is_expert": bool(info.pop(STORED_IN_INFO["is_expert"], False)),
        "explore_step": int(info.pop(STORED_IN_INFO["explore_step"], 0)),
        "sampling_mask": None if sampling_mask is None else SamplingMask.from_dict(sampling_mask),
    }


def experience_to_row(experience: Experience) -> dict[str, Any]:
    """Column values for the ``experiences`` table (see ``sql_schema.ExperienceModel``)."""
    return {
        "eid": experience.eid,
        "group_id": experience.group_id,
        "episode_id": experience.episode_id,
        "task_id": experience.task_id,
        "run_id": experience.run_id,
        "model_version": experience.model_version,
        "prompt_length": experience.prompt_length,
        "tokens": pack_ints(experience.tokens),
        "logprobs": pack_floats(experience.logprobs),
        "action_mask": pack_mask(experience.action_mask),
        "reward": experience.reward,
        "advantages": pack_floats(experience.advantages),
        "returns": pack_floats(experience.returns),
        "prompt_truncated": experience.prompt_truncated,
        "episode_truncated": experience.episode_truncated,
        "prompt_text": experience.prompt_text,
        "response_text": experience.response_text,
        "info": _info_with_extra_fields(experience),
        "metrics": experience.metrics or {},
    }


def row_to_experience(row: Any) -> Experience:
    """Inverse of ``experience_to_row``; ``row`` is anything with those attributes."""
    info = dict(row.info or {})
    extra = _extra_fields_from_info(info)
    return Experience(
        tokens=unpack_ints(row.tokens),
        prompt_length=row.prompt_length,
        logprobs=unpack_floats(row.logprobs),
        action_mask=unpack_mask(row.action_mask),
        reward=row.reward,
        advantages=unpack_floats(row.advantages),
        returns=unpack_floats(row.returns),
        eid=row.eid,
        group_id=row.group_id or "",
        episode_id=row.episode_id or "",
        task_id=row.task_id or "",
        run_id=row.run_id or 0,
        model_version=row.model_version or 0,
        prompt_truncated=bool(row.prompt_truncated),
        episode_truncated=bool(row.episode_truncated),
        prompt_text=row.prompt_text,
        response_text=row.response_text,
        info=info,
        metrics=dict(row.metrics or {}),
        **extra,
    )


def experience_to_json(experience: Experience) -> str:
    return json.dumps(experience.to_dict(), ensure_ascii=False, allow_nan=True)


def experience_from_json(line: str | dict[str, Any]) -> Experience:
    data = json.loads(line) if isinstance(line, str) else dict(line)
    return Experience.from_dict(data)
