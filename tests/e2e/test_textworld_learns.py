"""The TextWorld example in its simplest setting: eight generated one-room games with a
one-command quest, one command per episode. A format warm-up gives every listed command the
same weight, then multi_step_grpo raises the share of episodes won on those games."""

import json
import re
from pathlib import Path

import pytest

from trivium.cli.main import main
from trivium.data.builder import build_task_data

from .conftest import example_config, read_metrics, write_config

GAMES, EPISODES_PER_GAME, RL_STEPS = 8, 16, 16
ONE_COMMAND = {"max_env_steps": 1, "rendering": "compact"}


def write_format_split(data: Path) -> None:
    """``format.jsonl``: each training game's first message once with every listed command's
    number as the target, so the warm-up teaches the answer format and no preferred command.
    (The generator's ``response`` is one random number per game: on eight games the warm-up would
    learn a fixed, mostly losing, command for each.)"""
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    with (data / "format.jsonl").open("w") as out:
        for row in rows:
            listed = re.findall(r"^(\d+)\. ", row["compact_question"], flags=re.MULTILINE)
            assert listed == [str(n) for n in range(1, len(listed) + 1)], row["compact_question"]
            for number in listed:
                out.write(json.dumps({"compact_question": row["compact_question"], "response": number}) + "\n")


def simplest_setting(tmp_path: Path, model: str, data: str) -> str:
    """The example on the eight games: one compact command per episode, every game played eight
    times a step, evaluated on the same games (16 sampled episodes each) before and after."""
    config = example_config("textworld.yaml", tmp_path, model=model, data=data)
    config["model"]["max_prompt_tokens"], config["model"]["max_model_len"] = 320, 400
    buffer = config["buffer"]
    buffer["batch_size"], buffer["total_steps"] = GAMES, RL_STEPS
    explorer_input = buffer["explorer_input"]
    explorer_input["taskset"]["workflow_args"] = dict(ONE_COMMAND)
    (evaluation,) = explorer_input["eval_tasksets"]
    evaluation.update(name="games", split="train", repeat_times=EPISODES_PER_GAME, workflow_args=dict(ONE_COMMAND))
    config["explorer"]["eval_interval"] = RL_STEPS
    warm_up = config["stages"][0]["buffer"]
    warm_up["total_steps"] = 20
    warm_up["trainer_input"]["experience_buffer"]["split"] = "format"
    warm_up["trainer_input"]["experience_buffer"]["format"]["prompt_key"] = "compact_question"
    return write_config(tmp_path, config)


@pytest.mark.slow
def test_textworld_success_on_its_games_rises_with_multi_step_grpo(tmp_path, tiny_model_dir, one_torch_thread):
    data = build_task_data("textworld", tmp_path / "data", seed=0, num_train=GAMES, num_test=0, nb_objects=1)
    write_format_split(data)
    assert main(["run", "--config", simplest_setting(tmp_path, tiny_model_dir, str(data))]) == 0

    records = read_metrics(tmp_path / "runs" / "textworld" / "tiny" / "multi_step_grpo")
    evals = [r["eval/games/accuracy"] for r in records if "eval/games/accuracy" in r]
    rollouts = [r for r in records if "rollout/accuracy" in r]
    assert len(evals) == 2 and len(rollouts) == RL_STEPS
    # Every episode is one command, read from the reply or counted as invalid.
    assert all(r["rollout/env_steps"] == 1 and r["rollout/episode_truncated"] == 0 for r in rollouts)
    # The format held: most replies were listed commands (the warm-up leaves about 0.15 invalid
    # replies per episode; over the 16 steps the mean was 0.14 to 0.28 in eight runs at this
    # learning rate, single steps reaching 0.8 and recovering).
    invalid = [r["rollout/invalid_moves"] for r in rollouts]
    assert sum(invalid) / len(invalid) <= 0.35, invalid
    # The warm-up left a policy that picks among the listed commands about evenly: one game in
    # four to seven is won by a random pick.
    assert evals[0] <= 0.3, evals
    # Noise: each evaluation is 128 episodes (8 games x 16) of the same games, so the difference
    # of the two has a standard error of at most sqrt(2 * 0.5 * 0.5 / 128) = 0.0625, and about
    # 0.05 at the measured shares. A rise of 0.15 is three of those at the measured shares.
    # Measured over eight runs (four game sets, lr 5e-4 and 1e-3): 0.109 -> 0.414, 0.133 ->
    # 0.453, 0.141 -> 0.328, 0.109 -> 0.594, 0.117 -> 0.445, 0.117 -> 0.398, 0.148 -> 0.367,
    # 0.141 -> 0.641.
    assert evals[1] >= evals[0] + 0.15, f"success on the games did not rise beyond the noise: {evals}"
