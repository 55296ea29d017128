"""Workflows of Trinity-RFT that play an outside environment (ALFWorld, WebShop,
ScienceWorld) or read images: their names resolve, and each says what it needs.

Each class names the Python package its environment comes from (``required_package``); the
configuration rules report a missing package when a run is planned. The environment loops
themselves are not built: with the package installed, planning reports that instead
(``unsupported``). A workflow built anyway raises the same message.
"""

from __future__ import annotations

from typing import Any

from trivium.errors import UserError
from trivium.registry import missing_package_message
from trivium.workflows.base import Workflow
from trivium.workflows.registry import WORKFLOWS


class EnvironmentWorkflow(Workflow):
    environment: str = ""
    required_package: str = ""
    install_hint: str = ""
    unsupported: str = ""

    def __init__(self, **kwargs: Any) -> None:
        raise UserError(missing_package_message(type(self)) or self.unsupported)


def _environment(name: str, environment: str, package: str, hint: str) -> type:
    cls = type(
        f"{name.title().replace('_', '')}",
        (EnvironmentWorkflow,),
        {
            "environment": environment,
            "required_package": package,
            "install_hint": hint,
            "unsupported": (
                f"the {environment} environment loop is not built in trivium; use a plugin workflow "
                "(--plugin-dir) that drives the environment"
            ),
        },
    )
    WORKFLOWS.register(name, cls)
    return cls


ALFWORLD_HINT = "pip install alfworld, then download its data with `alfworld-download`"
for _name in ("alfworld_workflow", "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow", "step_wise_alfworld_workflow"):
    _environment(_name, "ALFWorld", "alfworld", ALFWORLD_HINT)
_environment("sciworld_workflow", "ScienceWorld", "scienceworld", "pip install scienceworld (it needs Java 1.8+)")
_environment(
    "webshop_workflow", "WebShop", "web_agent_site",
    "install WebShop from https://github.com/princeton-nlp/WebShop (it provides web_agent_site)",
)


class MultimodalWorkflow(Workflow):
    """Images in the prompt: trivium's engines and trainer take text only."""

    unsupported = "multimodal inputs are not supported: trivium's engines and trainer take text only"

    def __init__(self, **kwargs: Any) -> None:
        raise UserError(f"workflow simple_mm_workflow: {self.unsupported}")


WORKFLOWS.register("simple_mm_workflow", MultimodalWorkflow)
