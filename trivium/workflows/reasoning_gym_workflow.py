"""The ``reasoning_gym`` workflow: one question from a reasoning-gym dataset, scored by its own verifier.

The single-turn loop of ``simple`` with two defaults: the ``reasoning_gym`` reward function
and reasoning-gym's own default system prompt, which asks for the final answer between
``<answer>`` and ``</answer>`` (the block the reward reads). ``format.system_prompt`` or
``workflow_args.system_prompt`` replace the prompt as for every plaintext workflow.
"""

from __future__ import annotations

from trivium.data.reasoning_gym_tasks import load_reasoning_gym
from trivium.workflows.prompting import build_messages
from trivium.workflows.registry import register_builtin
from trivium.workflows.simple_workflow import SimpleWorkflow


@register_builtin("reasoning_gym")
class ReasoningGymWorkflow(SimpleWorkflow):
    default_reward_fn = "reasoning_gym"

    def build_messages(self) -> list[dict]:
        system_prompt = load_reasoning_gym().utils.SYSTEM_PROMPTS["default"]
        return build_messages(self.task, self.workflow_args, system_prompt)
