"""RULER workflows: a judge scores the whole group of responses to a task, relative to each other.

``math_ruler``: the policy samples ``repeat_times`` responses; one auxiliary model
(``explorer.auxiliary_models``, ``workflow_args.judge_index``, default 0) reads the question and
all the responses in one prompt and answers one score in [0, 1] per response (see
``ruler.py`` for the prompt and the parsing). Each response's reward is its score. The judge
never sees the ground truth; the task's reward function (default ``math_reward``) still
scores every response against it, reported as the metric ``gold_reward`` (with its
components) so the judge's agreement with the truth can be watched. A malformed verdict
gives every response reward 0 (a group without signal: GRPO gives it zero advantage) and the
metric ``judge_success`` 0. The judge samples greedily unless ``judge_rollout_args`` says
otherwise.

``math_trainable_ruler``: the policy is its own judge, and its judging is trained too. With
probability ``ground_truth_probability`` (default 0.2) a task counts as one whose ground
truth is known: the responses are rewarded by the reward function, and the policy writes
``repeat_times`` verdicts on them, each rewarded by ``1 - mean |score - target|`` against
the responses' rewards clipped to [0, 1] (0 when malformed). The verdicts are experiences of
their own group (``group_id`` = task id + ``-ruler``), trained beside the responses. Otherwise
the policy writes one verdict, whose scores are the responses' rewards (all 0 when malformed),
and the verdict itself is not trained. The verdicts sample with the task's rollout_args,
updated by ``judge_rollout_args``.

A judge compares the responses of one run of the workflow: all ``repeat_times`` of them,
unless ``explorer.max_repeat_times_per_runner`` splits a task into slices.
"""

from __future__ import annotations

import random
from typing import Any

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.workflows.base import Workflow
from trivium.workflows.math_workflow import MathWorkflow
from trivium.workflows.registry import register_builtin
from trivium.workflows.ruler import clipped_target, judging_reward, parse_ruler_scores, ruler_messages


class RulerBase(MathWorkflow):
    """Sampling and ground-truth scoring shared by both RULER workflows."""

    # The judge's calls are blocking; the asynchronous runner runs the whole workflow in a thread.
    run_async = Workflow.run_async

    def sample_and_score(self) -> tuple[list[Experience], str]:
        """The responses, each rewarded by the reward function (also kept as ``gold_reward``)."""
        messages = self.build_messages()
        experiences = self.model.chat(messages, n=self.task.repeat_times, **self.sampling_args())
        self.score_all(experiences, messages)
        for experience in experiences:
            experience.metrics["gold_reward"] = experience.reward
        question = str(messages[-1].get("content") or "") if messages else ""
        return experiences, question

    def judge_args(self, defaults: dict[str, Any]) -> dict[str, Any]:
        extra = self.workflow_args.get("judge_rollout_args") or {}
        if not isinstance(extra, dict):
            raise UserError(f"workflow_args.judge_rollout_args must be a mapping, got {extra!r}")
        return {**defaults, **{key: value for key, value in extra.items() if key != "n"}}


@register_builtin("math_ruler")
class MathRulerWorkflow(RulerBase):
    workflow_arg_names = ("system_prompt", "reward_fn_args", "judge_index", "judge_rollout_args")

    def judge(self):
        index = int(self.workflow_args.get("judge_index", 0))
        if not 0 <= index < len(self.auxiliary_models):
            raise UserError(
                f"math_ruler needs a judge: explorer.auxiliary_models has {len(self.auxiliary_models)} "
                f"model(s), workflow_args.judge_index is {index}."
            )
        return self.auxiliary_models[index]

    def run(self) -> list[Experience]:
        judge = self.judge()
        experiences, question = self.sample_and_score()
        asked = ruler_messages(question=question, responses=[e.response_text or "" for e in experiences])
        (verdict,) = judge.chat(asked, **self.judge_args({"temperature": 0.0}))
        scores = parse_ruler_scores(verdict.response_text or "", count=len(experiences))
        for experience, score in zip(experiences, scores or [0.0] * len(experiences)):
            experience.reward = score
            experience.metrics["judge_success"] = float(scores is not None)
            experience.info["judge_reply"] = verdict.response_text
        return experiences


@register_builtin("math_trainable_ruler")
class MathTrainableRulerWorkflow(RulerBase):
    workflow_arg_names = ("system_prompt", "reward_fn_args", "ground_truth_probability", "judge_rollout_args")

    def ground_truth_probability(self) -> float:
        probability = float(self.workflow_args.get("ground_truth_probability", 0.2))
        if not 0.0 <= probability <= 1.0:
            raise UserError(f"workflow_args.ground_truth_probability must lie in [0, 1], got {probability}")
        return probability

    def run(self) -> list[Experience]:
        truth_known = random.random() < self.ground_truth_probability()
        experiences, question = self.sample_and_score()
        asked = ruler_messages(question=question, responses=[e.response_text or "" for e in experiences])
        verdicts = self.model.chat(
            asked, n=self.task.repeat_times if truth_known else 1, **self.judge_args(self.sampling_args())
        )
        parsed = [parse_ruler_scores(v.response_text or "", count=len(experiences)) for v in verdicts]
        success = sum(scores is not None for scores in parsed) / len(verdicts)
        for experience in experiences:
            experience.metrics.update(judge_success=success, ground_truth_used=float(truth_known))
        if not truth_known:
            for experience, score in zip(experiences, parsed[0] or [0.0] * len(experiences)):
                experience.reward = score
            return experiences
        targets = [clipped_target(e.reward) for e in experiences]
        for run_id, (verdict, scores) in enumerate(zip(verdicts, parsed)):
            verdict.reward = 0.0 if scores is None else judging_reward(scores=scores, targets=targets)
            verdict.metrics.update(judge_success=float(scores is not None), reward_for_judge=verdict.reward)
            verdict.group_id = f"{self.task.task_id}-ruler"
            verdict.task_id = self.task.task_id
            verdict.run_id = run_id
            verdict.info.update(task_index=self.task.index, taskset=self.task.taskset_name, role="judge")
        return experiences + verdicts
