"""The gymnasium workflow: text rendering and reply parsing checked against gymnasium's own
state, returns, the invalid-reply rule, refusals, and the generated task rows."""

import json
import random
from collections import deque

import gymnasium
import pytest

from trivium.core.task import Task
from trivium.data.builder import build_task_data
from trivium.data.gymnasium_tasks import generate_gymnasium
from trivium.envs.gymnasium_text import BlackjackText, FrozenLakeText, TaxiText, adapter_for
from trivium.errors import UserError
from trivium.workflows.registry import WORKFLOWS

# gymnasium 1.4 retired Taxi-v3 for Taxi-v4; the adapter serves both.
TAXI = "Taxi-v4" if "Taxi-v4" in gymnasium.registry else "Taxi-v3"


def gym_task(raw, workflow="gymnasium", index=0, **workflow_args):
    return Task(
        raw=raw,
        workflow=workflow,
        workflow_args=workflow_args,
        task_id="g-1",
        taskset_name="gym",
        index=index,
    )


def play(model, raw, workflow="gymnasium", **workflow_args):
    """The workflow after one episode (its ``env`` is gymnasium's environment) and its experiences."""
    workflow_object = WORKFLOWS.get(workflow)(task=gym_task(raw, workflow, **workflow_args), model=model)
    return workflow_object, workflow_object.run()


def player_cell(text: str) -> tuple[int, int]:
    rows = text.split("\n")
    return next((r, row.index("P")) for r, row in enumerate(rows) if "P" in row)


def lake_observations(model) -> list[str]:
    """The lakes the model was shown, in order."""
    return [call["messages"][-1]["content"] for call in model.calls]


def test_frozen_lake_text_follows_gymnasium_position_and_goal_gives_return_one(async_scripted_model):
    # The 4x4 lake: SFFF / FHFH / FFFH / HFFG. Right, right, down, down, down, right reaches G.
    model = async_scripted_model(["R", "right", "D", "d", "Down please", "R"])
    raw = {"env_id": "FrozenLake-v1", "env_kwargs": {"is_slippery": False}, "seed": 5}
    workflow, (episode,) = play(model, raw)
    shown = lake_observations(model)
    assert shown[0] == "PFFF\nFHFH\nFFFH\nHFFG"
    assert [player_cell(text) for text in shown] == [(0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (3, 2)]
    assert workflow.env.unwrapped.s == 15  # gymnasium's own state: the goal, row 3 column 3
    assert episode.reward == 1.0 and episode.metrics["return"] == 1.0 and episode.metrics["accuracy"] == 1.0
    assert episode.metrics["actions_taken"] == 6 and episode.metrics["env_steps"] == 6
    assert episode.metrics["invalid_replies"] == 0 and episode.metrics["truncated"] == 0
    # The adapter's instructions are the default system prompt.
    assert model.calls[0]["messages"][0] == {"role": "system", "content": FrozenLakeText.instructions}


def test_slippery_8x8_lake_shows_where_gymnasium_put_the_player(async_scripted_model):
    model = async_scripted_model(["D", "R"])
    raw = {"env_id": "FrozenLake-v1", "env_kwargs": {"map_name": "8x8", "is_slippery": True}, "seed": 3}
    workflow, (episode,) = play(model, raw, max_env_steps=4)
    shown = lake_observations(model)
    assert [len(row) for row in shown[0].split("\n")] == [8] * 8
    # Replay the same seed and actions in gymnasium directly: the text followed its slips.
    env = gymnasium.make("FrozenLake-v1", map_name="8x8", is_slippery=True)
    state, _ = env.reset(seed=3)
    expected = [divmod(int(state), 8)]
    for action in [1, 2, 1, 2][: int(episode.metrics["actions_taken"])]:
        state, *_ = env.step(action)
        expected.append(divmod(int(state), 8))
    assert expected != [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2)]  # the ice slipped at this seed
    assert [player_cell(text) for text in shown] == expected[: len(shown)]
    assert divmod(int(workflow.env.unwrapped.s), 8) == expected[-1]


def test_custom_desc_lake_and_an_unreadable_reply_ends_the_episode(async_scripted_model):
    model = async_scripted_model(["R", "north", "R"])
    raw = {"env_id": "FrozenLake-v1", "env_kwargs": {"desc": ["SFF", "FHF", "FFG"], "is_slippery": False}}
    _, (episode,) = play(model, raw, invalid_reply_reward=-1)
    assert lake_observations(model) == ["PFF\nFHF\nFFG", "SPF\nFHF\nFFG"]
    # The invalid reply's reward is added to the return so far (0); `return` stays gymnasium's.
    assert (
        episode.reward == -1.0 and episode.metrics["return"] == 0 and episode.metrics["invalid_replies"] == 1
    )
    assert episode.metrics["actions_taken"] == 1 and episode.metrics["env_steps"] == 2
    assert episode.metrics["truncated"] == 0 and episode.metrics["accuracy"] == 0


def test_running_out_of_turns_is_counted_as_truncation(async_scripted_model):
    model = async_scripted_model(["L"])
    raw = {"env_id": "FrozenLake-v1", "env_kwargs": {"is_slippery": False}, "seed": 0}
    _, (episode,) = play(model, raw, max_env_steps=3)
    assert episode.metrics["truncated"] == 1 and episode.metrics["actions_taken"] == 3 and episode.reward == 0


def test_reply_parsing_by_action_names_aliases_and_first_letter():
    lake, taxi, blackjack = FrozenLakeText(), TaxiText(), BlackjackText()
    # gymnasium's actions: FrozenLake 0 left 1 down 2 right 3 up.
    assert [lake.parse(reply) for reply in ["L", " down", "r.", "UP!", "DRR", "north", "", "42"]] == [
        0,
        1,
        2,
        3,
        1,
        None,
        None,
        None,
    ]
    # Taxi: 0 south 1 north 2 east 3 west 4 pickup 5 dropoff; Blackjack: 0 stick 1 hit.
    assert [taxi.parse(reply) for reply in ["pickup", "D", "West", "x"]] == [4, 5, 3, None]
    assert [blackjack.parse(reply) for reply in ["hit", "stand", "S", "double"]] == [1, 0, 0, None]


def shortest_taxi_actions(env, state: int) -> list[int]:
    """Breadth-first search over gymnasium's own transition table to the delivery."""
    table = env.unwrapped.P
    paths, queue = {state: []}, deque([state])
    while queue:
        current = queue.popleft()
        for action, [(_, following, _, terminated)] in table[current].items():
            if terminated:
                return paths[current] + [action]
            if following not in paths:
                paths[following] = paths[current] + [action]
                queue.append(following)
    raise AssertionError("no delivery reachable")


def test_taxi_text_delivery_return_and_illegal_pickup(async_scripted_model):
    env = gymnasium.make(TAXI)
    state, _ = env.reset(seed=11)
    actions = shortest_taxi_actions(env, int(state))
    # An illegal pick-up first (the passenger is not in the taxi's cell), then the shortest delivery.
    taxi_row, taxi_column, passenger, _ = env.unwrapped.decode(int(state))
    assert env.unwrapped.locs[passenger] != (taxi_row, taxi_column)
    model = async_scripted_model(["P"] + [TaxiText.action_names[action] for action in actions])
    _, (episode,) = play(model, {"env_id": TAXI, "seed": 11}, max_env_steps=len(actions) + 1)
    first = model.calls[0]["messages"][-1]["content"].split("\n")
    assert first[taxi_row + 1][2 * taxi_column + 1] == "T"
    assert first[-1].startswith(f"Passenger at {'RGYB'[passenger]}.")
    # Returns: -10 for the illegal pick-up, -1 per move, +20 for the delivery.
    assert episode.reward == -10 - (len(actions) - 1) + 20 == episode.metrics["return"]
    assert episode.metrics["illegal_actions"] == 1 and episode.metrics["accuracy"] == 1.0
    assert episode.metrics["actions_taken"] == len(actions) + 1
    # Once picked up, the text says so.
    assert any("Passenger in the taxi." in call["messages"][-1]["content"] for call in model.calls)


def test_blackjack_text_shows_gymnasium_cards_and_the_return_is_its_reward(async_scripted_model):
    model = async_scripted_model(["stick"])
    workflow, (episode,) = play(model, {"env_id": "Blackjack-v1", "seed": 4})
    text = model.calls[0]["messages"][-1]["content"]
    player, dealer = workflow.env.unwrapped.player, workflow.env.unwrapped.dealer
    names = ["A" if card == 1 else str(card) for card in player]
    assert text.startswith(f"Your cards: {' '.join(names)} (total ")
    assert text.endswith(f"Dealer shows: {'A' if dealer[0] == 1 else dealer[0]}.")
    env = gymnasium.make("Blackjack-v1")
    env.reset(seed=4)
    _, reward, terminated, _, _ = env.step(0)
    assert terminated and episode.reward == reward and episode.metrics["accuracy"] == float(reward > 0)


def test_row_columns_win_over_workflow_args_and_kwargs_merge(async_scripted_model):
    model = async_scripted_model(["L"])
    raw = {"env_kwargs": json.dumps({"map_name": "4x4"})}  # JSON text works like a mapping
    workflow, _ = play(
        model,
        raw,
        max_env_steps=1,
        env_id="FrozenLake-v1",
        env_kwargs={"map_name": "8x8", "is_slippery": False},
    )
    assert workflow.env.unwrapped.desc.shape == (4, 4) and not workflow.env.spec.kwargs["is_slippery"]


def test_unsupported_env_id_is_refused_listing_the_supported_ones(async_scripted_model):
    with pytest.raises(UserError) as refused:
        play(async_scripted_model(["L"]), {"env_id": "CartPole-v1"})
    assert str(refused.value) == (
        "gymnasium environment 'CartPole-v1' has no text adapter in trivium; supported: FrozenLake-v1, "
        "FrozenLake8x8-v1, Taxi-v3, Taxi-v4, Blackjack-v1 (add one in trivium/envs/gymnasium_text.py)."
    )
    with pytest.raises(UserError, match="names no environment"):
        play(async_scripted_model(["L"]), {"seed": 1})
    with pytest.raises(UserError, match="invalid_reply_reward must be a number"):
        play(async_scripted_model(["L"]), {"env_id": "FrozenLake-v1"}, invalid_reply_reward="low")


def test_a_keyword_gymnasium_rejects_fails_with_its_error_and_the_task_index(async_scripted_model):
    task = gym_task({"env_id": "FrozenLake-v1", "env_kwargs": {"slippery": True}}, index=7)
    with pytest.raises(UserError) as failed:
        WORKFLOWS.get("gymnasium")(task=task, model=async_scripted_model(["L"])).run()
    message = str(failed.value)
    assert message.startswith("gymnasium task 7 of taskset 'gym': gymnasium.make('FrozenLake-v1'")
    assert "TypeError" in message and "slippery" in message


def test_step_wise_variant_gives_every_turn_the_episode_return(async_scripted_model):
    model = async_scripted_model(["R", "R", "D", "D", "D", "R"])
    raw = {"env_id": "FrozenLake-v1", "env_kwargs": {"is_slippery": False}}
    _, steps = play(model, raw, workflow="gymnasium_step_wise")
    assert [step.reward for step in steps] == [1.0] * 6 and len({step.episode_id for step in steps}) == 1


def test_generated_rows_have_disjoint_seeds_and_their_first_observation(tmp_path):
    out = build_task_data(
        "gymnasium",
        tmp_path / "lake",
        num_train=30,
        num_test=10,
        env="FrozenLake-v1",
        env_kwargs='{"is_slippery": false}',
        random_start=True,
    )
    splits = {
        split: [json.loads(line) for line in (out / f"{split}.jsonl").read_text().splitlines()]
        for split in ("train", "test")
    }
    assert not {row["seed"] for row in splits["train"]} & {row["seed"] for row in splits["test"]}
    for row in splits["train"] + splits["test"]:
        desc = row["env_kwargs"]["desc"]
        assert row["env_kwargs"]["is_slippery"] is False and "map_name" not in row["env_kwargs"]
        # The standard 4x4 lake's holes and goal; the start moved to a frozen cell.
        assert "".join(desc).replace("S", "F") == "FFFFFHFHFFFHHFFG" and "".join(desc).count("S") == 1
        assert row["question"] == "\n".join(desc).replace("S", "P") and row["response"] in "LDRU"
    # Without keywords the rows have no env_kwargs column (Parquet cannot store an empty struct).
    assert all("env_kwargs" not in row for row in generate_gymnasium(3, random.Random(0), env="Blackjack-v1"))
    with pytest.raises(UserError, match="random start is not available for Blackjack-v1"):
        generate_gymnasium(2, random.Random(0), env="Blackjack-v1", random_start=True)
    with pytest.raises(UserError, match="needs --env ID"):
        generate_gymnasium(2, random.Random(0))
    assert adapter_for(TAXI).env_ids == TaxiText.env_ids
