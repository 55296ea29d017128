"""Multi-turn environment workflows: the frozen lake rules, its episodes, step-wise rewards."""

import random

import pytest
import torch

from trivium.core.task import Task
from trivium.data.frozen_lake import generate_frozen_lake, map_space
from trivium.envs.frozen_lake import FrozenLake, solvable
from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper
from trivium.workflows.registry import WORKFLOWS

LAKE = ["S..", ".H.", "..G"]


def lake_task(workflow="frozen_lake", **workflow_args):
    return Task(
        raw={"map": LAKE},
        workflow=workflow,
        workflow_args=workflow_args,
        task_id="lake-1",
        taskset_name="lakes",
    )


def test_frozen_lake_rules_walls_holes_goal_and_unreadable_replies():
    lake = FrozenLake(LAKE)
    assert lake.observation() == "P..\n.H.\n..G"
    assert lake.move("U").observation == "P..\n.H.\n..G"  # the edge: stays put
    assert not lake.move("R").done
    hole = lake.move("d")  # lower case counts; (1, 1) is a hole
    assert hole.done and not hole.success
    lake = FrozenLake(LAKE)
    for move in "RRD":
        assert not lake.move(move).done
    goal = lake.move("D  (to the goal)")
    assert goal.done and goal.success and goal.observation.endswith("..P")
    unreadable = FrozenLake(LAKE).move("north")
    assert unreadable.done and not unreadable.valid
    assert not solvable(["SH", "HG"]) and solvable(LAKE)
    with pytest.raises(UserError, match="exactly one S and one G"):
        FrozenLake(["S..", "...", "..."])


def test_generated_maps_are_distinct_solvable_and_split_disjoint():
    rows = generate_frozen_lake(60, random.Random(0))
    maps = ["".join(row["map"]) for row in rows]
    assert len(set(maps)) == 60 and all(solvable(row["map"]) for row in rows)
    assert all(row["question"] == FrozenLake(row["map"]).observation() for row in rows)
    assert {row["response"] for row in rows} == {"U", "D", "L", "R"}
    with pytest.raises(UserError, match="distinct 3x3 maps"):
        generate_frozen_lake(len(map_space(3, 2)) + 1, random.Random(0))


def test_scripted_episode_reaches_the_goal(async_scripted_model):
    model = async_scripted_model(["R", "R", "D", "D", "D"])
    (episode,) = WORKFLOWS.get("frozen_lake")(task=lake_task(), model=model).run()
    assert episode.reward == 1.0 and episode.metrics["accuracy"] == 1.0 and episode.metrics["env_steps"] == 4
    assert model.async_calls == 4
    # Every observation went back as a user message after the model's own reply.
    last_messages = model.calls[-1]["messages"]
    assert [m["role"] for m in last_messages] == ["user"] + ["assistant", "user"] * 3
    assert last_messages[-1]["content"] == "...\n.HP\n..G"


def test_episode_stops_at_max_env_steps_without_reward(async_scripted_model):
    model = async_scripted_model(["L"])
    (episode,) = WORKFLOWS.get("frozen_lake")(task=lake_task(max_env_steps=3), model=model).run()
    assert episode.reward == 0.0 and episode.metrics["env_steps"] == 3 and episode.metrics["accuracy"] == 0.0


@pytest.fixture(scope="module")
def wrapper(tiny_model_dir):
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    return ModelWrapper(engine, max_response_tokens=3, max_model_len=400)


def test_episode_with_the_real_model_is_one_token_exact_sequence(wrapper):
    (episode,) = WORKFLOWS.get("frozen_lake")(task=lake_task(max_env_steps=4), model=wrapper).run()
    steps = int(episode.metrics["env_steps"])
    mask = episode.action_mask.int().tolist()
    model_runs = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    assert model_runs == steps and episode.reward in (0.0, 1.0)
    assert episode.group_id == "lake-1" and episode.info["model_turns"] == steps


def test_step_wise_workflow_gives_each_turn_the_final_reward(async_scripted_model, wrapper):
    model = async_scripted_model(["R", "R", "D", "D"])
    steps = WORKFLOWS.get("frozen_lake_step_wise")(task=lake_task(), model=model).run()
    assert [s.reward for s in steps] == [1.0] * 4
    assert len({s.episode_id for s in steps}) == 1 and steps[0].episode_id
    own = WORKFLOWS.get("frozen_lake_step_wise")(task=lake_task(reward_propagation="step"), model=model).run()
    assert [s.reward for s in own] == [0.0, 0.0, 0.0, 1.0]
    # With the real model: each step's response is exactly that turn's sampled tokens.
    real = WORKFLOWS.get("frozen_lake_step_wise")(task=lake_task(max_env_steps=3), model=wrapper).run()
    for step in real:
        assert step.action_mask.all() and step.response_length <= 3
        assert torch.equal(step.tokens[: real[0].prompt_length], real[0].tokens[: real[0].prompt_length])


def test_step_wise_episode_cut_by_the_context_has_no_repeated_step(tiny_model_dir):
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    short = ModelWrapper(engine, max_response_tokens=3, max_model_len=48)
    steps = WORKFLOWS.get("frozen_lake_step_wise")(task=lake_task(max_env_steps=6), model=short).run()
    lengths = [step.tokens.numel() for step in steps]
    assert lengths == sorted(set(lengths)) and max(lengths) <= 48
