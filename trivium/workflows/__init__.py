"""Workflows: how a task becomes scored experiences.

Built-ins: ``simple``, ``math``, ``countdown`` (also as ``simple_workflow``, ...). Look one
up with ``WORKFLOWS.get(name)``; a dotted path (``my_package.module:MyWorkflow``) or a
plugin registered with ``@WORKFLOWS.register("name")`` works the same way.
"""

from trivium.workflows.base import Workflow
from trivium.workflows.registry import WORKFLOWS

__all__ = ["WORKFLOWS", "Workflow"]
