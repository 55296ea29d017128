"""The ``math`` workflow: a question with one final answer, scored by ``math_reward`` by default.

Same loop as ``simple``, with a default system prompt asking for the answer between
``<answer>`` tags, and the answer it extracted recorded in each experience's ``info``
(``extracted_answer``) for inspection.

``math_rm`` is the same single-turn loop with a reward-model reward by default
(``rm_gallery_reward``), as Trinity-RFT's configurations use it.
"""

from __future__ import annotations

from typing import Any

from trivium.core.experience import Experience
from trivium.data.prompts import MATH_SYSTEM_PROMPT
from trivium.rewards.answers import extract_answer
from trivium.workflows.registry import register_builtin
from trivium.workflows.simple_workflow import SimpleWorkflow


@register_builtin("math")
class MathWorkflow(SimpleWorkflow):
    default_system_prompt = MATH_SYSTEM_PROMPT
    default_reward_fn = "math_reward"

    def score_one(self, experience: Experience, *, prompt: str, ground_truth: Any) -> None:
        super().score_one(experience, prompt=prompt, ground_truth=ground_truth)
        experience.info["extracted_answer"] = extract_answer(experience.response_text or "")


@register_builtin("math_rm")
class MathRMWorkflow(SimpleWorkflow):
    """Single-turn math scored by a reward model: Trinity-RFT pairs it with ``rm_gallery_reward``.

    The same loop as ``simple``; the task's reward function (``default_reward_fn_type``, default
    ``rm_gallery_reward``) gives each reply its reward, and every component it returns is a metric.
    """

    default_system_prompt = MATH_SYSTEM_PROMPT
    default_reward_fn = "rm_gallery_reward"
