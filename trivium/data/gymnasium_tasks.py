"""Tasks for the ``gymnasium`` workflow: one row per episode to play (env id, kwargs, seed).

Owns ``trivium init data --task gymnasium``. Rows have ``env_id``, ``env_kwargs`` (left out
when empty) and ``seed``. Seeds are drawn without replacement, so the train and test splits
(the first and last rows) never share one. Every row's environment is made and reset once
here, so a bad keyword fails now, with gymnasium's message. A row also
carries its first observation as ``question`` and an action name drawn uniformly at random
as ``response``: targets for a warm-up that teaches the answer format, not a policy. With
``random_start`` (environments whose adapter offers it: FrozenLake) each row's map moves
the start to a random cell, written as the ``desc`` keyword.
"""

from __future__ import annotations

import random

from trivium.envs.gymnasium_text import adapter_for, make_env, read_env_kwargs, supported_env_ids
from trivium.errors import UserError

SEED_SPACE = 2**31


def generate_gymnasium(
    count: int,
    rng: random.Random,
    env: str | None = None,
    env_kwargs: dict | str | None = None,
    random_start: bool = False,
) -> list[dict]:
    """``count`` rows of ``env`` with distinct reset seeds, in a seeded random order."""
    if not env:
        raise UserError(f"--task gymnasium needs --env ID, one of: {', '.join(supported_env_ids())}.")
    adapter = adapter_for(env)
    kwargs = read_env_kwargs(env_kwargs, "--env-kwargs")
    layout = make_env(env, kwargs, f"--env {env}") if random_start else None
    rows = []
    for seed in rng.sample(range(SEED_SPACE), count):
        row_kwargs = adapter.with_random_start(layout, kwargs, rng) if random_start else kwargs
        made = make_env(env, row_kwargs, f"--env {env}")
        observation, _ = made.reset(seed=seed)
        # No env_kwargs column when there are none: Parquet cannot store an empty struct.
        kwargs_column = {"env_kwargs": row_kwargs} if row_kwargs else {}
        rows.append(
            {
                "env_id": env,
                **kwargs_column,
                "seed": seed,
                "question": adapter.render(made, observation),
                "response": rng.choice(adapter.action_names),
            }
        )
        made.close()
    return rows
