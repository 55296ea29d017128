"""Guessing game, tool-call and rubric-judge workflows; the judge is trivium's own engine."""

import json
import random

import pytest

from trivium.core.task import Task
from trivium.data.guessing import generate_guessing
from trivium.envs.guessing import GuessingGame
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper
from trivium.rewards.registry import REWARD_FNS, score
from trivium.workflows.registry import WORKFLOWS
from trivium.workflows.rubric_judge_workflow import parse_score

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
EXPECTED = {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}


def call(name, arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_guessing_game_feedback_and_generated_rows():
    game = GuessingGame(secret=7, low=1, high=16)
    assert game.guess("5").feedback == "Higher." and game.guess("I say 9").feedback == "Lower."
    assert game.guess("7").success and not game.guess("seven").valid
    rows = generate_guessing(50, random.Random(0), max_number=8)
    assert all(1 <= row["secret"] <= 8 and row["question"] == "Guess my number from 1 to 8." for row in rows)


def test_guessing_workflow_uses_the_feedback_turns(async_scripted_model):
    model = async_scripted_model(["8", "4", "6"])
    task = Task(raw={"secret": 6, "low": 1, "high": 16}, workflow="guessing", task_id="g")
    (episode,) = WORKFLOWS.get("guessing")(task=task, model=model).run()
    assert episode.reward == 1.0 and episode.metrics["env_steps"] == 3
    assert [m["content"] for m in model.calls[-1]["messages"] if m["role"] == "user"][1:] == [
        "Lower.",
        "Higher.",
    ]


@pytest.mark.parametrize(
    "reply, reward",
    [
        (call("get_weather", {"city": "Oslo", "days": 2}), 1.0),  # name, schema, exact arguments
        (call("get_weather", {"city": "Bergen"}), 0.75),  # name and schema
        (call("get_weather", {"days": "two"}), 0.5),  # name only: city missing, days not an integer
        (call("get_time", {"city": "Oslo", "days": 2}), 0.0),  # wrong function
        ("It is sunny in Oslo.", 0.0),  # no call
    ],
)
def test_tool_call_reward_by_hand(reply, reward):
    value, components = score(
        REWARD_FNS.get("tool_call_reward"),
        prompt="",
        response=reply,
        ground_truth=EXPECTED,
        tools=[WEATHER_TOOL],
    )
    assert value == reward


def test_toolcall_workflow_passes_tools_and_scores_each_reply(scripted_model):
    model = scripted_model([call("get_weather", {"city": "Oslo", "days": 2}), "no idea"])
    task = Task(
        raw={
            "question": "Weather in Oslo for 2 days?",
            "tools": [WEATHER_TOOL],
            "answer": json.dumps(EXPECTED),
        },
        workflow="toolcall",
        repeat_times=2,
        task_id="t",
    )
    experiences = WORKFLOWS.get("toolcall")(task=task, model=model).run()
    assert [e.reward for e in experiences] == [1.0, 0.0]
    assert experiences[0].metrics["call_arguments"] == 1.0


@pytest.fixture(scope="module")
def tiny_wrapper(tiny_model_dir):
    return ModelWrapper(
        create_engine("hf", model_path=tiny_model_dir, seed=0), max_response_tokens=4, max_model_len=256
    )


def test_rubric_judge_grades_each_reply_with_the_auxiliary_engine(tiny_wrapper):
    judge = ModelWrapper(tiny_wrapper.engine, max_response_tokens=3, max_model_len=256, enable_history=True)
    task = Task(
        raw={"question": "What is 2 + 2?", "answer": "4"},
        workflow="rubric_judge",
        repeat_times=3,
        workflow_args={"rubric": "Full marks for the right number."},
        task_id="j",
    )
    experiences = WORKFLOWS.get("rubric_judge")(task=task, model=tiny_wrapper, auxiliary_models=[judge]).run()
    judged = judge.extract_experience_from_history()
    assert len(experiences) == 3 and len(judged) == 3
    for experience, verdict in zip(experiences, judged):
        assert (
            "Full marks for the right number." in verdict.prompt_text
            and "Reference answer: 4" in verdict.prompt_text
        )
        expected = parse_score(verdict.response_text)
        assert experience.reward == (0.0 if expected is None else expected)
        assert experience.metrics["judge_unparsed"] == float(expected is None)
    assert parse_score("8/10") == 0.8 and parse_score("11") is None and parse_score("none") is None
