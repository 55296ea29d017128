"""The ``math_boxed`` workflow: math answers in ``\\boxed{}``, scored by ``math_boxed_reward``.

Also registered under the other names Trinity-RFT's configurations use for the
same single-turn loop: ``async_math_workflow`` (trivium's runners make any workflow
asynchronous) and the distillation workflows ``on_policy_distill_workflow`` and
``on_policy_distill_math_workflow`` (the teacher's logprobs are added by the explorer for
every workflow, so distillation needs no workflow of its own).
"""

from __future__ import annotations

from trivium.workflows.math_workflow import MathWorkflow
from trivium.workflows.registry import WORKFLOWS, register_builtin
from trivium.workflows.simple_workflow import SimpleWorkflow

BOXED_SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem step by step and put the final answer "
    "in \\boxed{}, for example \\boxed{42}."
)


@register_builtin("math_boxed")
class MathBoxedWorkflow(MathWorkflow):
    default_system_prompt = BOXED_SYSTEM_PROMPT
    default_reward_fn = "math_boxed_reward"


WORKFLOWS.register("async_math_workflow", MathWorkflow)
WORKFLOWS.register("on_policy_distill_workflow", SimpleWorkflow)
WORKFLOWS.register("on_policy_distill_math_workflow", MathBoxedWorkflow)
