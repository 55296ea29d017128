"""The ``tool_arithmetic`` workflow: answer an arithmetic question with the ``calculator`` tool.

An episode is one chat: the user's question (with the row's ``tools`` rendered by the chat
template) → the model's turn, its ``<tool_call>`` blocks parsed into OpenAI ``tool_calls``
by the rollout model's ``tool_call_parser`` → one ``tool`` message per call with the
calculator's answer → the model's next turn, until a turn calls no tool (its content is the
final answer) or ``max_env_steps`` model turns (default 3) have been played. The episode is
one token sequence (token-in, token-out), its ``action_mask`` marking the model's turns.

Reward 1 when the final answer equals the row's ``answer`` (``format.response_key``), else 0.
Metrics: ``accuracy``, ``tool_calls`` (calls made), ``tool_errors`` (calls the calculator
refused). Needs ``explorer.rollout_model.tool_call_parser`` (``hermes``) and
``enable_auto_tool_choice: true``; ``tool_arithmetic_step_wise`` returns one experience per
model turn instead (see ``multi_turn.StepWiseRewardWorkflow``).
"""

from __future__ import annotations

from typing import Any

from trivium.core.experience import Experience
from trivium.envs.calculator import call_calculator
from trivium.errors import UserError
from trivium.workflows.multi_turn import EnvStep, MultiTurnEnvWorkflow, StepWiseRewardWorkflow
from trivium.workflows.prompting import build_messages, ground_truth_of, tools_of
from trivium.workflows.registry import register_builtin


class CalculatorEpisode:
    """The episode half shared by the episode-level and step-wise workflows."""

    default_max_env_steps = 3
    episode_arg_names = ("tools_key",)

    def reset(self) -> list[dict]:
        if self.model.tool_call_parser is None:
            raise UserError(
                "the tool_arithmetic workflow reads the model's calls as OpenAI tool_calls: set "
                "explorer.rollout_model.tool_call_parser: hermes and enable_auto_tool_choice: true"
            )
        self.answer = ground_truth_of(self.task)
        if self.answer is None:
            raise UserError(
                f"tool_arithmetic task {self.task.index} of taskset '{self.task.taskset_name}' has no answer column "
                f"(format.response_key, default 'answer'); row columns: {', '.join(map(str, self.task.raw))}"
            )
        self.success = False
        self.calls = 0
        self.errors = 0
        return build_messages(self.task, self.workflow_args)

    def tools(self) -> list[dict]:
        return tools_of(self.task, self.workflow_args, "tool_arithmetic")

    def answer_turn(self, reply: dict) -> tuple[EnvStep, list[dict]]:
        """What one model turn did, and the tool messages that answer its calls (none: it answered)."""
        calls = reply.get("tool_calls") or []
        if not calls:
            self.success = (reply.get("content") or "").strip() == str(self.answer).strip()
            return EnvStep(observation=None, reward=1.0 if self.success else 0.0, done=True), []
        tool_messages = []
        errors = 0
        for call in calls:
            function = call.get("function", {})
            text, worked = call_calculator(function.get("name", ""), function.get("arguments", "{}"))
            errors += not worked
            tool_messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": text})
        self.calls += len(calls)
        self.errors += errors
        return EnvStep(observation="", reward=0.0, done=False), tool_messages

    async def play(self) -> list[tuple[Experience, EnvStep | None]]:
        messages = self.reset()
        tools = self.tools()
        turns: list[tuple[Experience, EnvStep | None]] = []
        self.turn_states = []
        for _ in range(self.max_env_steps):
            self.turn_states.append(None)
            ((experience, reply),) = await self.model.chat_turns_async(
                messages, tools=tools, **self.sampling_args()
            )
            if experience.episode_truncated:  # no room left in the context: the episode ends here
                turns.append((experience, None))
                break
            result, tool_messages = self.answer_turn(reply)
            turns.append((experience, result))
            if result.done:
                break
            messages = messages + [reply, *tool_messages]
        return turns

    def episode_metrics(self) -> dict[str, Any]:
        return {
            "accuracy": 1.0 if self.success else 0.0,
            "tool_calls": float(self.calls),
            "tool_errors": float(self.errors),
        }


@register_builtin("tool_arithmetic")
class ToolArithmeticWorkflow(CalculatorEpisode, MultiTurnEnvWorkflow):
    """One experience per episode."""


@register_builtin("tool_arithmetic_step_wise")
class ToolArithmeticStepWiseWorkflow(CalculatorEpisode, StepWiseRewardWorkflow):
    """One experience per model turn."""
