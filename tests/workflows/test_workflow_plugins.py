import textwrap

from trivium.core.task import Task
from trivium.registry import load_plugin_dir
from trivium.rewards import REWARD_FNS
from trivium.workflows import WORKFLOWS


def test_plugin_dir_registers_a_workflow_and_a_reward(tmp_path, scripted_model):
    (tmp_path / "shout.py").write_text(
        textwrap.dedent(
            """
            from trivium.rewards import REWARD_FNS
            from trivium.workflows import WORKFLOWS, Workflow


            @REWARD_FNS.register("length_reward_test_plugin")
            def length_reward(*, prompt, response, ground_truth, **kwargs):
                return {"length": len(response) / 10}


            @WORKFLOWS.register("shout_test_plugin")
            class ShoutWorkflow(Workflow):
                def run(self):
                    [experience] = self.model.chat([{"role": "user", "content": self.task.raw["text"].upper()}])
                    experience.reward = 1.0
                    return [experience]
            """
        )
    )
    load_plugin_dir(tmp_path)
    workflow_cls = WORKFLOWS.get("shout_test_plugin")
    assert workflow_cls.can_repeat is False
    model = scripted_model(["ok"])
    [experience] = workflow_cls(task=Task(raw={"text": "hi"}), model=model).run()
    assert model.calls[0]["messages"] == [{"role": "user", "content": "HI"}]
    assert experience.reward == 1.0

    # The plugin's reward also drives a built-in workflow.
    task = Task(raw={"question": "q"}, workflow="simple", reward_fn="length_reward_test_plugin", format={})
    [scored] = WORKFLOWS.get("simple")(task=task, model=scripted_model(["12345"])).run()
    assert scored.reward == 0.5 and scored.metrics == {"length": 0.5}
    assert "length_reward_test_plugin" in REWARD_FNS.names()


def test_dotted_path_names_a_workflow_class():
    assert WORKFLOWS.get("trivium.workflows.math_workflow:MathWorkflow") is WORKFLOWS.get("math")


def test_an_object_of_a_plugin_file_is_named_by_the_file_name(tmp_path):
    from trivium.models.engine import ENGINES

    (tmp_path / "my_engine_factory.py").write_text("def create(model_path=None, **kwargs):\n    return ('built', model_path)\n")
    load_plugin_dir(tmp_path)
    assert ENGINES.get("my_engine_factory:create")(model_path="m") == ("built", "m")
