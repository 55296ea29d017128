"""The ``rubric_judge`` workflow: an auxiliary model grades each reply against a rubric.

The policy answers the task's question (``repeat_times`` replies in one call); the judge, an
auxiliary model (``explorer.auxiliary_models``; ``workflow_args.judge_index``, default 0),
reads the rubric, the question and one reply, and answers a score from 0 to 10. The reward
is score / 10. A judge answer without a score in range gives reward 0 and the metric
``judge_unparsed`` 1. The judge samples greedily unless ``judge_rollout_args`` says otherwise.

workflow_args: ``rubric`` (the grading instructions; the row's ``rubric`` column wins),
``judge_index``, ``judge_rollout_args``, ``system_prompt``.
"""

from __future__ import annotations

import re
from typing import Any

from trivium.core.experience import Experience
from trivium.core.reward_check import reward_problem
from trivium.errors import UserError
from trivium.workflows.base import Workflow
from trivium.workflows.prompting import build_messages, ground_truth_of
from trivium.workflows.registry import register_builtin

DEFAULT_RUBRIC = "Score the answer for correctness and clarity."
SCORE = re.compile(r"\d+(?:\.\d+)?")


def judge_messages(*, rubric: str, question: str, answer: str, reference: Any) -> list[dict]:
    lines = [rubric, "", f"Question: {question}", f"Answer: {answer}"]
    if reference not in (None, ""):
        lines.append(f"Reference answer: {reference}")
    lines.append("Reply with a single score from 0 to 10.")
    return [{"role": "user", "content": "\n".join(lines)}]


def parse_score(text: str) -> float | None:
    """The first number in ``text`` when it lies in [0, 10], as a fraction of 10."""
    match = SCORE.search(text or "")
    if match is None:
        return None
    score = float(match.group(0))
    # A score is a reward: it passes the rule every reward passes, then the rubric's range.
    if reward_problem(score) is not None or not 0 <= score <= 10:
        return None
    return score / 10


@register_builtin("rubric_judge")
class RubricJudgeWorkflow(Workflow):
    can_repeat = True
    workflow_arg_names = ("rubric", "judge_index", "judge_rollout_args", "system_prompt")

    def judge(self):
        index = int(self.workflow_args.get("judge_index", 0))
        if not 0 <= index < len(self.auxiliary_models):
            raise UserError(
                "rubric_judge needs a judge: explorer.auxiliary_models has "
                f"{len(self.auxiliary_models)} model(s), "
                f"workflow_args.judge_index is {index}."
            )
        return self.auxiliary_models[index]

    def run(self) -> list[Experience]:
        judge = self.judge()
        messages = build_messages(self.task, self.workflow_args)
        args = {key: value for key, value in self.task.rollout_args.items() if key != "n"}
        experiences = self.model.chat(messages, n=self.task.repeat_times, **args)
        question = str(messages[-1].get("content") or "")
        rubric = str(self.task.raw.get("rubric") or self.workflow_args.get("rubric") or DEFAULT_RUBRIC)
        judge_args = {"temperature": 0.0, **(self.workflow_args.get("judge_rollout_args") or {})}
        reference = ground_truth_of(self.task)
        for run_id, experience in enumerate(experiences):
            asked = judge_messages(
                rubric=rubric, question=question, answer=experience.response_text or "", reference=reference
            )
            (verdict,) = judge.chat(asked, **judge_args)
            score = parse_score(verdict.response_text or "")
            experience.reward = 0.0 if score is None else score
            experience.metrics.update(judge_unparsed=float(score is None), judge_score=experience.reward)
            experience.info.update(judge_reply=verdict.response_text, task_index=self.task.index)
            experience.group_id = experience.task_id = self.task.task_id
            experience.run_id = run_id
        return experiences
