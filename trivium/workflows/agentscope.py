"""Workflows of Trinity-RFT built on the AgentScope agent framework: their names resolve, and
each says that it needs the ``agentscope`` package.

These workflows run an AgentScope agent (ReAct over tools, web search, an e-mail inbox)
against trivium's OpenAI-compatible endpoint. trivium does not ship those agents: without
the package, planning a run reports it (``missing_package_message``); with it installed,
planning reports that the bridge to AgentScope is not built (``unsupported``). Write the
agent loop as a plugin workflow (``docs/agents.md``) to train such an agent.
"""

from __future__ import annotations

from typing import Any

from trivium.errors import UserError
from trivium.registry import missing_package_message
from trivium.workflows.base import Workflow
from trivium.workflows.registry import WORKFLOWS


class AgentScopeWorkflow(Workflow):
    environment = "the AgentScope agent framework"
    required_package = "agentscope"
    install_hint = "pip install agentscope"

    unsupported = (
        "the AgentScope agents are not built in trivium; write the agent loop as a plugin workflow "
        "(--plugin-dir) that calls the model's OpenAI-compatible client"
    )

    def __init__(self, **kwargs: Any) -> None:
        raise UserError(missing_package_message(type(self)) or f"{type(self).__name__}: {self.unsupported}")


def _agentscope(name: str, class_name: str, hint: str) -> type:
    cls = type(class_name, (AgentScopeWorkflow,), {"install_hint": hint})
    WORKFLOWS.register(name, cls)
    return cls


VERSION_1 = "pip install 'agentscope>=1.0'"
VERSION_0 = "pip install 'agentscope<1.0' (these workflows use its 0.x interface)"
_agentscope("agentscope_react_workflow", "AgentScopeReactWorkflow", VERSION_1)
_agentscope("agentscope_react_math_workflow", "AgentScopeReactMathWorkflow", VERSION_1)
_agentscope("agentscope_v1_react_search_workflow", "AgentScopeReactSearchWorkflow", VERSION_1)
_agentscope("email_search_workflow", "EmailSearchWorkflow", VERSION_1)
_agentscope("agentscopev0_react_math_workflow", "AgentScopeV0ReactMathWorkflow", VERSION_0)
