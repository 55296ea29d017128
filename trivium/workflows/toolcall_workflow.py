"""The ``toolcall`` workflow: answer with a function call, scored by ``tool_call_reward``.

The task row holds the question (``format.prompt_key``, or ``messages``), the tools the
model may call (``tools`` column, OpenAI format with JSON-schema ``parameters``; rename with
``workflow_args.tools_key``) and the expected call as ground truth (``format.response_key``,
default ``answer``: ``{"name": ..., "arguments": {...}}``). The tools go to the chat
template; the reply's calls are read with ``workflow_args.tool_call_parser`` (``hermes``).
"""

from __future__ import annotations

from typing import Any

from trivium.core.experience import Experience
from trivium.workflows.prompting import tools_of
from trivium.workflows.registry import register_builtin
from trivium.workflows.simple_workflow import SimpleWorkflow


@register_builtin("toolcall")
class ToolCallWorkflow(SimpleWorkflow):
    workflow_arg_names = SimpleWorkflow.workflow_arg_names + ("tools_key", "tool_call_parser")
    default_reward_fn = "tool_call_reward"

    def tools(self) -> list[dict]:
        return tools_of(self.task, self.workflow_args, "toolcall")

    def run(self) -> list[Experience]:
        messages = self.build_messages()
        experiences = self.model.chat(
            messages, n=self.task.repeat_times, tools=self.tools(), **self.sampling_args()
        )
        return self.score_all(experiences, messages)

    async def run_async(self) -> list[Experience]:
        messages = self.build_messages()
        experiences = await self.model.chat_async(
            messages, n=self.task.repeat_times, tools=self.tools(), **self.sampling_args()
        )
        return self.score_all(experiences, messages)

    def score_one(self, experience: Experience, *, prompt: str, ground_truth: Any) -> None:
        self.reward_fn_args.setdefault("tools", self.tools())
        self.reward_fn_args.setdefault(
            "tool_call_parser", self.workflow_args.get("tool_call_parser", "hermes")
        )
        super().score_one(experience, prompt=prompt, ground_truth=ground_truth)
