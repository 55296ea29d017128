"""gigpo: episode-level group advantages plus step-level groups of equal anchor states, by hand."""

import math

import pytest
import torch

from trivium.algorithm import ADVANTAGE_FNS, PRESETS, requires_episodes, requires_groups
from trivium.algorithm.advantages import computed_by_explorer, requires_row_info


def run(rewards, groups, episodes, infos, mask=None, **args):
    rewards = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
    mask = torch.ones_like(rewards) if mask is None else torch.tensor(mask, dtype=torch.float32)
    token_rewards = torch.zeros_like(mask)
    token_rewards[:, -1:] = rewards
    return ADVANTAGE_FNS.get("gigpo")(
        token_level_rewards=token_rewards,
        response_mask=mask,
        group_ids=torch.tensor(groups),
        episode_ids=torch.tensor(episodes),
        row_info=infos,
        **args,
    )


def test_gigpo_declares_it_needs_groups_episodes_and_each_rows_info():
    fn = ADVANTAGE_FNS.get("gigpo")
    assert requires_groups(fn) and requires_episodes(fn) and requires_row_info(fn)
    assert computed_by_explorer(fn)
    assert PRESETS["gigpo"].advantage_fn == "gigpo" and PRESETS["gigpo"].policy_loss_fn == "ppo"


def test_episode_and_anchor_state_advantages_add_up():
    # One task, two episodes of two steps each. Step rewards: episode 0 [0, 1], episode 1 [0, 0].
    # Both first steps act from state "s0"; the second steps from "a" and "b" (seen once each).
    # Episode returns [1, 0]: fnorm none -> A^E = (G - 0.5) / (1 + eps) = [0.5, -0.5].
    # Discounted returns (gamma 0.5): episode 0 [0.5, 1], episode 1 [0, 0].
    # Anchor "s0" holds returns [0.5, 0] -> A^S = [0.25, -0.25]; "a", "b" alone -> 0.
    # omega 2: A = A^E + 2 A^S = [1.0, 0.5, -1.0, -0.5].
    infos = [
        {"step_reward": 0.0, "env_state_hash": "s0"},
        {"step_reward": 1.0, "env_state_hash": "a"},
        {"step_reward": 0.0, "env_state_hash": "s0"},
        {"step_reward": 0.0, "env_state_hash": "b"},
    ]
    advantages, returns = run(
        [1, 1, 0, 0],
        groups=[0, 0, 0, 0],
        episodes=[0, 0, 1, 1],
        infos=infos,
        omega=2.0,
        gamma=0.5,
        epsilon=0.0,
    )
    assert advantages[:, 0].tolist() == pytest.approx([1.0, 0.5, -1.0, -0.5])
    assert torch.equal(advantages, returns)


def test_fnorm_std_divides_by_the_sample_std_of_each_set():
    # Same batch, fnorm std, gamma 1: A^E = +-0.5 / std([1, 0]) = +-0.7071;
    # anchor s0 returns [1, 0] -> +-0.7071; A = A^E + A^S.
    infos = [
        {"step_reward": 0.0, "env_state_hash": "s0"},
        {"step_reward": 1.0, "env_state_hash": "a"},
        {"step_reward": 0.0, "env_state_hash": "s0"},
        {"step_reward": 0.0, "env_state_hash": "b"},
    ]
    advantages, _ = run([1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 1, 1], infos, fnorm="std", epsilon=0.0)
    a = 0.5 / math.sqrt(0.5)
    assert advantages[:, 0].tolist() == pytest.approx([2 * a, a, -2 * a, -a], abs=1e-6)


def test_without_step_rewards_the_last_row_reward_is_the_terminal_reward():
    # No step_reward key: episode 0's last row has reward 1 -> rewards [0, 1]; episode 1 -> [0, 0].
    # No state hashes: only the episode level, A^E = [0.5, 0.5, -0.5, -0.5].
    advantages, _ = run([7, 1, 7, 0], [0, 0, 0, 0], [0, 0, 1, 1], [{}, {}, {}, {}], epsilon=0.0)
    assert advantages[:, 0].tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5])


def test_anchor_states_group_across_tasks_and_a_lone_episode_keeps_its_return():
    # Task 0 has one episode (return 2): mean 0, d 1 -> A^E = 2. Task 1: returns [1, 3] -> [-1, 1].
    # All three single-step episodes act from state "x": returns [2, 1, 3] -> mean 2 -> A^S [0, -1, 1].
    infos = [{"step_reward": r, "env_state_hash": "x"} for r in (2.0, 1.0, 3.0)]
    advantages, _ = run([2, 1, 3], [0, 1, 1], [0, 1, 2], infos, epsilon=0.0)
    assert advantages[:, 0].tolist() == pytest.approx([2.0, -2.0, 2.0])


def test_advantage_covers_model_tokens_only():
    infos = [{"step_reward": 1.0}, {"step_reward": 0.0}]
    advantages, _ = run([1, 0], [0, 0], [0, 1], infos, mask=[[1, 0, 1], [0, 1, 1]], epsilon=0.0)
    assert advantages.tolist() == [[0.5, 0.0, 0.5], [0.0, -0.5, -0.5]]


def test_an_unknown_fnorm_is_refused():
    with pytest.raises(ValueError, match="fnorm"):
        run([1], [0], [0], [{}], fnorm="max")


class ScriptedMoves:
    """Plays the given moves in order (a stand-in policy); token ids are character codes."""

    def __init__(self, moves):
        self.moves = list(moves)

    async def chat_async(self, messages, n=1, **_):
        from trivium.core.experience import Experience

        prompt = "".join(m["content"] for m in messages)
        reply = self.moves.pop(0)
        return [
            Experience(
                tokens=torch.tensor([ord(c) % 256 for c in prompt + reply]),
                prompt_length=len(prompt),
                prompt_text=prompt,
                response_text=reply,
            )
        ]


def test_frozen_lake_steps_carry_their_state_and_gigpo_compares_steps_from_the_same_cell():
    from trivium.core.experience import episode_index
    from trivium.core.task import Task
    from trivium.workflows.registry import WORKFLOWS

    task = Task(
        raw={"map": ["S..", ".H.", "..G"]}, workflow="frozen_lake_step_wise", task_id="lake", taskset_name="l"
    )
    # Episode A: R, R, D, D reaches the goal. Episode B: R, D falls into the hole.
    rows = []
    for moves in (["R", "R", "D", "D"], ["R", "D"]):
        rows += WORKFLOWS.get("frozen_lake_step_wise")(task=task, model=ScriptedMoves(moves)).run()
    infos = [row.info for row in rows]
    assert [info["step_reward"] for info in infos] == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    hashes = [info["env_state_hash"] for info in infos]
    # both episodes start from the start cell, then both move from (0, 1)
    assert hashes[0] == hashes[4] and hashes[1] == hashes[5] and len(set(hashes)) == 4
    advantages, _ = run([row.reward for row in rows], [0] * 6, episode_index(rows), infos, epsilon=0.0)
    # Returns: A [1, 1, 1, 1], B [0, 0]. A^E = +-0.5. Anchors: start [1, 0] -> +-0.5, (0, 1) [1, 0] -> +-0.5.
    assert advantages[:, 0].tolist() == pytest.approx([1.0, 1.0, 0.5, 0.5, -1.0, -1.0])
