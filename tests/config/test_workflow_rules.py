"""Workflow names at plan time: a dotted path must import, an outside package is named."""

from __future__ import annotations

import pytest

from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare
from trivium.core.task import Task
from trivium.errors import UserError
from trivium.workflows.registry import WORKFLOWS


def workflow(name: str) -> dict:
    return {"buffer": {"explorer_input": {"default_workflow_type": name}}}


def error_of(write_config, patch: dict) -> str:
    with pytest.raises(ConfigError) as error:
        prepare(write_config(patch))
    return str(error.value)


def test_a_dotted_workflow_whose_module_is_absent_is_one_error_naming_it(write_config):
    message = error_of(write_config, workflow("absent_user_code.agents.workflow.MyWorkflow"))
    assert "(2 problems)" not in message and "default_workflow_type" in message
    assert "No module named 'absent_user_code'" in message and "--plugin-dir" in message


def test_a_dotted_workflow_that_imports_plans(write_config):
    (stage,) = prepare(write_config(workflow("trivium.workflows.math_workflow:MathWorkflow")))
    assert stage.config.buffer.explorer_input.tasksets[0].default_workflow_type.endswith(":MathWorkflow")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("agentscope_react_workflow", "'agentscope': pip install 'agentscope>=1.0'"),
        ("agentscopev0_react_math_workflow", "agentscope<1.0"),
        ("email_search_workflow", "'agentscope'"),
    ],
)
def test_agentscope_workflows_name_the_package(write_config, name, words):
    message = error_of(write_config, workflow(name))
    assert words in message and "AgentScope" in message and "(2 problems)" not in message
    with pytest.raises(UserError, match="agentscope"):
        WORKFLOWS.get(name)(task=Task(raw={"question": "q"}), model=None)


def test_math_rm_names_the_reward_package_once(write_config):
    message = error_of(write_config, workflow("math_rm_workflow"))
    assert "'rm_gallery'" in message and "(2 problems)" not in message


@pytest.mark.parametrize(
    ("package", "patch", "words"),
    [
        ("agentscope", workflow("agentscope_react_workflow"), "the AgentScope agents are not built in trivium"),
        ("rm_gallery", workflow("math_rm_workflow"), "the bridge to RM-Gallery reward models is not built"),
    ],
)
def test_with_the_package_installed_what_is_not_built_is_still_refused_at_plan(
    write_config, tmp_path, monkeypatch, package, patch, words
):
    (tmp_path / package).mkdir()  # an importable package of that name: "installed" for the check
    (tmp_path / package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = error_of(write_config, patch)
    assert words in message and "(2 problems)" not in message
