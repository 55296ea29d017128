"""The ``simple`` workflow: one prompt, ``repeat_times`` sampled replies, each scored by a reward fn.

Owns the single-turn loop shared by the math and countdown workflows: build the messages,
sample all replies in one ``chat`` call, score every reply, and fill each experience's
reward, metrics, info and grouping fields.

workflow_args:
  ``system_prompt``: system prompt when the task's format sets none.
  ``reward_fn_args``: extra keyword arguments for the reward function.
"""

from __future__ import annotations

from typing import Any

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.rewards.registry import RewardFn, reads_response_length, resolve_reward_fn, score
from trivium.workflows.base import Workflow
from trivium.workflows.prompting import build_messages, ground_truth_of
from trivium.workflows.registry import register_builtin


@register_builtin("simple")
class SimpleWorkflow(Workflow):
    can_repeat = True
    workflow_arg_names = ("system_prompt", "reward_fn_args")
    default_system_prompt: str | None = None
    default_reward_fn: str | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reward_fn = self.resolve_reward_fn()
        self.reward_fn_args = dict(self.workflow_args.get("reward_fn_args") or {})

    def resolve_reward_fn(self) -> RewardFn:
        name = self.task.reward_fn or self.default_reward_fn
        if name is None:
            raise UserError(
                f"taskset '{self.task.taskset_name}' uses workflow {type(self).__name__}, which needs a reward "
                "function: set default_reward_fn_type (e.g. 'math_reward')."
            )
        return resolve_reward_fn(name)

    def build_messages(self) -> list[dict]:
        return build_messages(self.task, self.workflow_args, self.default_system_prompt)

    def ground_truth(self) -> Any:
        return ground_truth_of(self.task)

    def sampling_args(self) -> dict[str, Any]:
        """``task.rollout_args`` without ``n``: the number of samples is ``repeat_times``."""
        return {key: value for key, value in self.task.rollout_args.items() if key != "n"}

    def run(self) -> list[Experience]:
        messages = self.build_messages()
        experiences = self.model.chat(messages, n=self.task.repeat_times, **self.sampling_args())
        return self.score_all(experiences, messages)

    async def run_async(self) -> list[Experience]:
        chat_async = getattr(self.model, "chat_async", None)
        if chat_async is None:
            return await super().run_async()
        messages = self.build_messages()
        experiences = await chat_async(messages, n=self.task.repeat_times, **self.sampling_args())
        return self.score_all(experiences, messages)

    def score_all(self, experiences: list[Experience], messages: list[dict]) -> list[Experience]:
        ground_truth = self.ground_truth()
        # The reward sees the last message's text: the question, for plaintext prompts.
        prompt = str(messages[-1].get("content") or "") if messages else ""
        for run_id, experience in enumerate(experiences):
            self.score_one(experience, prompt=prompt, ground_truth=ground_truth)
            experience.group_id = self.task.task_id
            experience.task_id = self.task.task_id
            experience.run_id = run_id
            experience.info.update(
                task_index=self.task.index, taskset=self.task.taskset_name, ground_truth=ground_truth
            )
        return experiences

    def score_one(self, experience: Experience, *, prompt: str, ground_truth: Any) -> None:
        # A reward fn that declares ``reads_response_length`` also gets the reply's length in tokens.
        length = (
            {"response_length": experience.response_length} if reads_response_length(self.reward_fn) else {}
        )
        reward, components = score(
            self.reward_fn,
            prompt=prompt,
            response=experience.response_text or "",
            ground_truth=ground_truth,
            **length,
            **self.reward_fn_args,
        )
        experience.reward = reward
        experience.metrics.update(components)
