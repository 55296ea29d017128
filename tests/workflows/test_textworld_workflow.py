"""The ``textworld`` workflow on real compiled TextWorld games: generation, replies, episodes."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from trivium.core.task import Task
from trivium.data.builder import build_task_data
from trivium.envs.textworld_game import ANSWER_HINT, read_command, start_game
from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper
from trivium.workflows.registry import WORKFLOWS


def read_split(data: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (data / f"{split}.jsonl").read_text().splitlines()]


def listed_commands(observation: str) -> list[str]:
    """The numbered commands of an observation, in order."""
    listed = re.findall(r"^(\d+)\. (.+)$", observation.split("Commands:\n", 1)[1], flags=re.MULTILINE)
    assert [int(number) for number, _ in listed] == list(range(1, len(listed) + 1))
    return [command for _, command in listed]


def numbered(commands: list[str]) -> str:
    return "\n".join(f"{number}. {command}" for number, command in enumerate(commands, 1))


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    """Two training games and one held-out game, compiled once for this module."""
    return build_task_data(
        "textworld", tmp_path_factory.mktemp("tw") / "data", seed=3, num_train=2, num_test=1
    )


def game_task(row: dict, workflow: str = "textworld", **workflow_args) -> Task:
    return Task(
        raw=row,
        workflow=workflow,
        workflow_args=workflow_args,
        task_id=f"game-{row['seed']}",
        taskset_name="games",
    )


def test_generation_is_deterministic_for_a_seed_and_splits_share_no_game(games, tmp_path):
    # The same seed draws the same game seeds in the same order: the first game comes again.
    (again,) = read_split(
        build_task_data("textworld", tmp_path / "again", seed=3, num_train=1, num_test=0), "train"
    )
    first = read_split(games, "train")[0]
    assert Path(again["game_file"]).is_file() and Path(again["game_file"]).with_suffix(".json").is_file()
    assert again["game_file"] != first["game_file"]
    assert {k: v for k, v in again.items() if k != "game_file"} == {
        k: v for k, v in first.items() if k != "game_file"
    }
    assert json.loads(Path(again["game_file"]).with_suffix(".json").read_text()) == json.loads(
        Path(first["game_file"]).with_suffix(".json").read_text()
    )
    train, test = read_split(games, "train"), read_split(games, "test")
    assert len(train) == 2 and len(test) == 1
    assert len({row["seed"] for row in train + test}) == 3
    for row in train + test:
        assert len(row["walkthrough"]) == 1  # the default quest is one command long
        assert row["question"].startswith(row["objective"]) and "Commands:\n1. " in row["question"]
        assert row["compact_question"] == f"{row['objective']}\n{numbered(listed_commands(row['question']))}"
        assert row["walkthrough"][0] in listed_commands(row["question"])
        assert 1 <= int(row["response"]) <= len(listed_commands(row["question"]))


def test_unknown_generation_option_is_refused(tmp_path):
    with pytest.raises(
        UserError, match="do not apply to task 'textworld'.*world_size, nb_objects, quest_length"
    ):
        build_task_data("textworld", tmp_path, num_train=1, num_test=0, size=3)


def test_reply_is_read_by_number_or_by_text():
    commands = ["close safe", "examine safe", "take passkey from safe"]
    assert read_command("3", commands) == "take passkey from safe"
    assert read_command("  Take   Passkey from SAFE. ", commands) == "take passkey from safe"
    assert read_command("0", commands) is None and read_command("4", commands) is None
    assert read_command("open safe", commands) is None and read_command("", commands) is None


def test_following_the_games_walkthrough_wins_with_reward_one(games, async_scripted_model):
    for row in read_split(games, "train") + read_split(games, "test"):
        env, state = start_game(row["game_file"], with_walkthrough=True)
        env.close()
        assert state.policy_commands == row["walkthrough"]
        model = async_scripted_model(list(state.policy_commands))
        (episode,) = WORKFLOWS.get("textworld")(task=game_task(row), model=model).run()
        assert episode.reward == 1.0 and episode.metrics["accuracy"] == 1.0
        assert episode.metrics["env_steps"] == len(state.policy_commands)
        assert episode.metrics["invalid_moves"] == 0.0 and episode.metrics["truncated"] == 0.0
        assert model.calls[0]["messages"] == [{"role": "user", "content": row["question"]}]


def test_invalid_reply_is_counted_and_ends_the_episode_without_reward(games, async_scripted_model):
    row = read_split(games, "train")[0]
    for invalid in ("dance", "99"):
        model = async_scripted_model([invalid, row["walkthrough"][0]])
        (episode,) = WORKFLOWS.get("textworld")(task=game_task(row, max_env_steps=3), model=model).run()
        assert episode.metrics["invalid_moves"] == 1.0 and episode.metrics["env_steps"] == 1
        assert (
            episode.reward == 0.0
            and episode.metrics["accuracy"] == 0.0
            and episode.metrics["truncated"] == 0.0
        )
        assert len(model.calls) == 1  # the winning command that followed was never asked for
    # invalid_reply_reward makes an unreadable reply worse than a wrong command; success stays 0.
    model = async_scripted_model(["dance"])
    (episode,) = WORKFLOWS.get("textworld")(task=game_task(row, invalid_reply_reward=-1), model=model).run()
    assert (
        episode.reward == -1.0
        and episode.metrics["accuracy"] == 0.0
        and episode.metrics["invalid_moves"] == 1.0
    )
    with pytest.raises(UserError, match="invalid_reply_reward must be a number.*got 'low'"):
        WORKFLOWS.get("textworld")(task=game_task(row, invalid_reply_reward="low"), model=model).run()


def test_command_by_number_after_a_harmless_one_wins(games, async_scripted_model):
    row = read_split(games, "train")[0]
    winning_number = listed_commands(row["question"]).index(row["walkthrough"][0]) + 1
    model = async_scripted_model(["LOOK", str(winning_number)])
    (episode,) = WORKFLOWS.get("textworld")(task=game_task(row, max_env_steps=3), model=model).run()
    assert (
        episode.reward == 1.0
        and episode.metrics["env_steps"] == 2
        and episode.metrics["invalid_moves"] == 0.0
    )
    # The second observation is the game's answer to "look", then the same commands.
    second_prompt = model.calls[1]["messages"][-1]["content"]
    assert second_prompt.startswith("-= ") and second_prompt.endswith(ANSWER_HINT)
    assert (
        "\n>" not in second_prompt and "\n\n\n" not in second_prompt
    )  # no prompt line, status bar, blank runs
    assert listed_commands(second_prompt) == listed_commands(row["question"])


def test_compact_rendering_leaves_out_the_room_the_commands_line_and_the_hint(games, async_scripted_model):
    row = read_split(games, "train")[0]
    commands = listed_commands(row["question"])
    model = async_scripted_model(["look", row["walkthrough"][0]])
    (episode,) = WORKFLOWS.get("textworld")(
        task=game_task(row, max_env_steps=2, rendering="compact"), model=model
    ).run()
    assert episode.reward == 1.0 and episode.metrics["env_steps"] == 2
    # First the objective and the numbered commands only; the full rendering's room is not in it.
    first_prompt = model.calls[0]["messages"][0]["content"]
    assert first_prompt == row["compact_question"] == f"{row['objective']}\n{numbered(commands)}"
    assert len(first_prompt) < len(row["question"]) and "-= " not in first_prompt
    # Then the game's answer to "look" (the room) and the same numbered commands.
    second_prompt = model.calls[1]["messages"][-1]["content"]
    assert second_prompt.startswith("-= ") and second_prompt.endswith(f"\n{numbered(commands)}")
    assert "Commands:" not in second_prompt and ANSWER_HINT not in second_prompt


def test_unknown_rendering_is_refused(games, async_scripted_model):
    task = game_task(read_split(games, "train")[0], rendering="short")
    with pytest.raises(UserError, match="workflow_args.rendering must be one of full, compact, got 'short'"):
        WORKFLOWS.get("textworld")(task=task, model=async_scripted_model(["1"])).run()


def test_episode_out_of_turns_is_truncated_without_reward(games, async_scripted_model):
    row = read_split(games, "test")[0]
    model = async_scripted_model(["look"])
    steps = WORKFLOWS.get("textworld_step_wise")(
        task=game_task(row, "textworld_step_wise", max_env_steps=2), model=model
    ).run()
    assert [step.reward for step in steps] == [0.0, 0.0]
    assert steps[-1].metrics["truncated"] == 1.0 and steps[-1].metrics["invalid_moves"] == 0.0
    assert steps[-1].metrics["accuracy"] == 0.0 and steps[-1].metrics["env_steps"] == 2


def test_row_without_a_game_is_refused(async_scripted_model):
    task = game_task({"seed": 1, "question": "?"})
    with pytest.raises(UserError, match="no 'game_file' column.*trivium init data --task textworld"):
        WORKFLOWS.get("textworld")(task=task, model=async_scripted_model(["1"])).run()


def test_episode_with_the_real_model_is_one_token_sequence(games, tiny_model_dir):
    wrapper = ModelWrapper(
        create_engine("hf", model_path=tiny_model_dir, seed=0), max_response_tokens=4, max_model_len=1024
    )
    (episode,) = WORKFLOWS.get("textworld")(
        task=game_task(read_split(games, "test")[0], max_env_steps=2), model=wrapper
    ).run()
    steps = int(episode.metrics["env_steps"])
    mask = episode.action_mask.int().tolist()
    assert sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])) == steps >= 1
    assert episode.reward in (0.0, 1.0) and episode.info["model_turns"] == steps


def test_episodes_in_parallel_threads_all_load_their_games(games, async_scripted_model):
    # The explorer's runners play in threads; textworld's game loader is not thread-safe alone.
    rows = (read_split(games, "train") + read_split(games, "test")) * 3
    with ThreadPoolExecutor(max_workers=len(rows)) as pool:
        episodes = list(
            pool.map(
                lambda row: WORKFLOWS.get("textworld")(
                    task=game_task(row), model=async_scripted_model(row["walkthrough"])
                ).run()[0],
                rows,
            )
        )
    assert [episode.reward for episode in episodes] == [1.0] * len(rows)
