"""The workflow registry. Built-ins register on first lookup; plugins with ``@WORKFLOWS.register``.

Each built-in is registered under a short name and a ``*_workflow`` name (``math`` and
``math_workflow``), since configurations commonly use the longer form.
"""

from __future__ import annotations

from trivium.registry import Registry

WORKFLOWS: Registry[type] = Registry(
    "workflow",
    builtin_modules=(
        "trivium.workflows.simple_workflow",
        "trivium.workflows.math_workflow",
        "trivium.workflows.countdown_workflow",
        "trivium.workflows.frozen_lake_workflow",
        "trivium.workflows.gymnasium_workflow",
        "trivium.workflows.textworld_workflow",
        "trivium.workflows.guessing_workflow",
        "trivium.workflows.toolcall_workflow",
        "trivium.workflows.rubric_judge_workflow",
        "trivium.workflows.math_boxed_workflow",
        "trivium.workflows.ruler_workflow",
        "trivium.workflows.bots_workflow",
        "trivium.workflows.environments",
        "trivium.workflows.agentscope",
        "trivium.workflows.reasoning_gym_workflow",
        "trivium.workflows.tool_arithmetic_workflow",
    ),
)


def register_builtin(name: str):
    """Register a built-in workflow class as ``name`` and ``name_workflow``."""

    def add(cls: type) -> type:
        WORKFLOWS.register(name, cls)
        WORKFLOWS.register(f"{name}_workflow", cls)
        return cls

    return add
