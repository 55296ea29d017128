"""One door for every reward: workflows, reward functions, judges, operators and serve feedback share one rule."""

import pytest
import torch

from trivium.buffer.pipeline import ExperiencePipeline
from trivium.config.schema import OperatorConfig
from trivium.core.experience import Experience
from trivium.core.experience_check import experience_problem
from trivium.core.reward_check import MAX_ABS_REWARD, reward_problem
from trivium.models.served_sessions import SessionRecorder
from trivium.models.server_guard import BadRequest
from trivium.rewards.registry import score
from trivium.workflows.rubric_judge_workflow import parse_score
from trivium.workflows.ruler import parse_ruler_scores

REFUSED = [1e308, float("inf"), float("nan"), -2e6, 10**400, True, "1.0", None]


@pytest.mark.parametrize("reward", [0.0, -1, 0.5, MAX_ABS_REWARD, -MAX_ABS_REWARD])
def test_finite_rewards_within_the_limit_pass(reward):
    assert reward_problem(reward) is None


@pytest.mark.parametrize("reward", REFUSED)
def test_a_workflow_experience_with_a_bad_reward_is_refused_with_the_rules_words(reward):
    experience = Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=reward)
    assert experience_problem(experience) == reward_problem(reward) is not None


@pytest.mark.parametrize("returned", [1e308, float("nan"), {"reward": -5e6}, {"a": 6e5, "b": 6e5}])
def test_a_reward_function_returning_a_bad_reward_raises_naming_itself_and_the_rule(returned):
    def outside_reward(**_):
        return returned

    with pytest.raises(ValueError, match=r"outside_reward\(\).*finite number within ±1e\+06"):
        score(outside_reward, prompt="p", response="r", ground_truth=None)


def test_judges_scores_pass_the_same_rule():
    assert parse_ruler_scores("[0.5, 1e308]", count=2) is None
    assert parse_ruler_scores("[0.5, 2]", count=2) == [0.5, 1.0]  # in range, clipped to [0, 1]
    assert parse_score("9" * 400) is None  # inf as a float
    assert parse_score("score: 7") == pytest.approx(0.7)


def test_a_shaped_reward_beyond_the_rule_is_not_kept():
    good = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0, info={"scale": 2.0})
    huge = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0, info={"scale": 1e300})
    rules = [{"stats_key": "scale", "op_type": "MUL", "weight": 2.0}]
    pipeline = ExperiencePipeline.from_configs(
        [OperatorConfig(name="reward_shaping_mapper", args={"reward_shaping_configs": rules})])
    kept, metrics = pipeline.process([good, huge])
    assert [e.reward for e in kept] == [4.0] and metrics["reward_shaping_mapper/refused_rewards"] == 1.0


@pytest.mark.parametrize("reward", [1e308, float("nan"), "high"])
def test_serve_feedback_refuses_a_bad_reward_naming_the_rule(reward):
    recorder = SessionRecorder(wrappers=[object()], write=lambda experiences: None, version=lambda: 0)
    with pytest.raises(BadRequest, match=r"`reward` must be a finite number within ±1e\+06 \(the rule every reward"):
        recorder.feedback({"session_id": "s", "reward": reward})
