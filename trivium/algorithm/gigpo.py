"""GiGPO: group-in-group advantages for multi-step agents (Feng et al., 2025, arXiv:2505.10978).

Owns the ``gigpo`` advantage estimator. Rows are the steps of episodes (``episode_ids``),
episodes the samples of a task's group (``group_ids``), in batch order within an episode.
Each row's ``info`` (``row_info``, one dict per row) may carry the step's own reward
(``step_reward_key``) and the hash of the environment state the step acted from
(``env_state_hash_key``, an *anchor state*).

    r_k      = the step's own reward; without any in the episode, the episode's last row's
               reward on its last step and 0 before
    G_e      = sum_k r_k                              (episode return)
    R_k      = sum_{j >= k} gamma^(j-k) r_j           (discounted return from step k)
    A^E_e    = (G_e - mean_g) / (d_g + epsilon)       over the episodes of group g
    A^S_k    = (R_k - mean_s) / (d_s + epsilon)       over the steps of the whole batch that
               acted from the same anchor state s; 0 for a state seen once or a step without one
    A_k      = A^E_e(k) + omega * A^S_k, on every response token of row k

``d`` is the sample std with ``fnorm='std'`` and 1 with ``fnorm='none'``; a set of one value
takes mean 0 and d = 1. Anchor states are compared across the whole batch (one explorer step),
so a state hash should name the task's environment as well as the position in it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from trivium.algorithm.advantages import _broadcast, _check_inputs, _require, register_advantage_fn
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

FNORMS = ("std", "none")


def normalized(values: list[float], *, fnorm: str, epsilon: float) -> list[float]:
    """(v - mean) / (d + epsilon), d = sample std ('std') or 1 ('none'); one value: mean 0, d 1."""
    if len(values) == 1:
        mean, spread = 0.0, 1.0
    else:
        tensor = torch.tensor(values, dtype=torch.float32)
        mean = float(tensor.mean())
        spread = float(tensor.std()) if fnorm == "std" else 1.0
    return [(value - mean) / (spread + epsilon) for value in values]


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """R_k = r_k + gamma R_{k+1}, from the last step back."""
    returns, running = [0.0] * len(rewards), 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * running
        returns[k] = running
    return returns


@register_advantage_fn("gigpo", needs_group=True, needs_episodes=True)
@no_grad
def gigpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    row_info: list[dict[str, Any]],
    group_ids: torch.Tensor | None = None,
    episode_ids: torch.Tensor | None = None,
    omega: float = 1.0,
    gamma: float = 1.0,
    fnorm: str = "none",
    epsilon: float = 1e-6,
    step_reward_key: str = "step_reward",
    env_state_hash_key: str = "env_state_hash",
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Episode-level plus anchor-state step-level advantages (see the module docstring).

    token_level_rewards, response_mask: (B, R); group_ids, episode_ids: (B,); row_info: B
    dicts. Returns (advantages, returns), both (B, R) and equal.
    """
    _check_inputs(token_level_rewards, response_mask)
    if fnorm not in FNORMS:
        raise ValueError(f"gigpo: fnorm must be 'std' or 'none', got {fnorm!r}")
    group_ids = _require(group_ids, "group_ids", "gigpo", "it compares episodes of the same task")
    rows = token_level_rewards.shape[0]
    if len(row_info) != rows:
        raise ValueError(f"gigpo: row_info has {len(row_info)} entries for {rows} rows")
    if episode_ids is None:
        episode_ids = torch.arange(rows)
    row_scores = token_level_rewards.float().sum(dim=-1).tolist()
    episode_rows: dict[int, list[int]] = defaultdict(list)
    for row, episode in enumerate(episode_ids.tolist()):
        episode_rows[episode].append(row)
    step_return, episode_return = episode_step_returns(
        episode_rows, row_info, row_scores, step_reward_key, gamma
    )
    episode_advantage = episode_advantages(episode_rows, group_ids, episode_return, fnorm, epsilon)
    step_advantage = anchor_step_advantages(row_info, step_return, env_state_hash_key, fnorm, epsilon)
    episode_of_row = episode_ids.tolist()
    # A_k = A^E_e(k) + omega * A^S_k
    per_row = torch.tensor(
        [episode_advantage[episode_of_row[row]] + omega * step_advantage[row] for row in range(rows)],
        dtype=torch.float32,
    )
    advantages = _broadcast(per_row, response_mask)
    return advantages, advantages.clone()


gigpo_advantages.needs_row_info = True


def episode_step_returns(
    episode_rows: dict[int, list[int]],
    row_info: list[dict[str, Any]],
    row_scores: list[float],
    step_reward_key: str,
    gamma: float,
) -> tuple[list[float], dict[int, float]]:
    """Each row's discounted return from its step on, and each episode's total reward.

    A step's reward is its ``row_info[step_reward_key]``; an episode whose rows carry none has
    its last row's sequence score as its only reward (sparse).
    """
    step_return = [0.0] * len(row_scores)
    episode_return: dict[int, float] = {}
    for episode, members in episode_rows.items():
        if any(step_reward_key in (row_info[row] or {}) for row in members):
            rewards = [float((row_info[row] or {}).get(step_reward_key, 0.0)) for row in members]
        else:
            # sparse: the episode's reward sits on its last step
            rewards = [0.0] * (len(members) - 1) + [row_scores[members[-1]]]
        for row, value in zip(members, discounted_returns(rewards, gamma)):
            step_return[row] = value
        episode_return[episode] = sum(rewards)
    return step_return, episode_return


def episode_advantages(
    episode_rows: dict[int, list[int]],
    group_ids: torch.Tensor,
    episode_return: dict[int, float],
    fnorm: str,
    epsilon: float,
) -> dict[int, float]:
    """A^E: each episode's return normalised among the episodes of its task group."""
    group_episodes: dict[int, list[int]] = defaultdict(list)
    for episode, members in episode_rows.items():
        group_episodes[int(group_ids[members[0]])].append(episode)
    episode_advantage: dict[int, float] = {}
    for episodes in group_episodes.values():
        scores = normalized([episode_return[e] for e in episodes], fnorm=fnorm, epsilon=epsilon)
        episode_advantage.update(zip(episodes, scores))
    return episode_advantage


def anchor_step_advantages(
    row_info: list[dict[str, Any]],
    step_return: list[float],
    env_state_hash_key: str,
    fnorm: str,
    epsilon: float,
) -> list[float]:
    """A^S: each row's step return normalised among the rows from the same environment state
    (its anchor, ``row_info[env_state_hash_key]``); 0 for a row without one or alone in it."""
    anchors: dict[str, list[int]] = defaultdict(list)
    for row, info in enumerate(row_info):
        state = (info or {}).get(env_state_hash_key)
        if state is not None:
            anchors[str(state)].append(row)
    step_advantage = [0.0] * len(step_return)
    for members in anchors.values():
        if len(members) < 2:
            continue
        scores = normalized([step_return[row] for row in members], fnorm=fnorm, epsilon=epsilon)
        for row, score in zip(members, scores):
            step_advantage[row] = score
    return step_advantage
