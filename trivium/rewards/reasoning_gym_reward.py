"""The ``reasoning_gym`` reward: a reply scored by its reasoning-gym dataset's own ``score_answer``.

Owns reading the ground truth written by ``trivium.data.reasoning_gym_tasks`` (``dataset``,
``config`` and the ``entry`` with its metadata), rebuilding that dataset once per
(name, config) and calling its verifier. The answer handed to the verifier is the content
of the reply's last ``<answer>...</answer>`` block, which is what reasoning-gym's own
system prompts ask for; a reply without one is scored as no answer (``None``), which every
reasoning-gym verifier scores 0. reasoning-gym is imported on first use only.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from trivium.errors import UserError
from trivium.rewards.answers import extract_answer_tag
from trivium.rewards.registry import REWARD_FNS


def parse_ground_truth(ground_truth: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(dataset name, config, entry)`` from the ground truth (a dict or its JSON text)."""
    data = ground_truth
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("entry"), dict) or "dataset" not in data:
        raise UserError(
            f"reasoning_gym ground truth must be JSON with 'dataset', 'config' and 'entry' keys, got "
            f"{str(ground_truth)[:80]!r}; build the taskset with trivium init data --task reasoning_gym:NAME "
            "(its 'response' column)."
        )
    return str(data["dataset"]), dict(data.get("config") or {}), data["entry"]


@functools.lru_cache(maxsize=64)
def scoring_dataset(name: str, config_json: str):
    """The dataset whose ``score_answer`` scores rows of ``name`` built with this config."""
    from trivium.data.reasoning_gym_tasks import check_dataset_name, create_dataset

    check_dataset_name(name)
    return create_dataset(name, json.loads(config_json), seed=0, size=1)


@REWARD_FNS.register("reasoning_gym")
def reasoning_gym_reward(*, prompt: str, response: str, ground_truth: Any, **kwargs: Any) -> dict[str, float]:
    """The dataset's score in [0, 1] for the reply's ``<answer>`` content.

    Components: ``accuracy`` (1 when the score is 1), ``format`` (1 when the reply has an
    answer block); ``reward`` is the dataset's score, partial credit included.
    """
    if kwargs:
        raise UserError(
            f"reward function 'reasoning_gym' takes no reward_fn_args, got: {', '.join(sorted(kwargs))}."
        )
    name, config, entry = parse_ground_truth(ground_truth)
    answer = extract_answer_tag(response) if isinstance(response, str) else None
    dataset = scoring_dataset(name, json.dumps(config, sort_keys=True))
    score = float(dataset.score_answer(answer, entry))
    return {"reward": score, "accuracy": float(score >= 1.0), "format": float(answer is not None)}
