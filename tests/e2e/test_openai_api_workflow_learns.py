"""``enable_openai_api`` end to end: a workflow written like an agent, against the official ``openai``
client and a base URL, trains the policy through its recorded history.

The toy objective is the short-answer one of the algorithm tests: the untrained tiny model
rambles to its token limit, and the policy should learn to stop sooner.
"""

import textwrap

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

AGENT_WORKFLOW = textwrap.dedent(
    """
    import openai

    from trivium.workflows.base import Workflow
    from trivium.workflows.registry import WORKFLOWS


    @WORKFLOWS.register("short_agent")
    class ShortAgent(Workflow):
        can_repeat = True

        def run(self):
            # What an agent framework gets: a base URL, a key and a model name, nothing of trivium.
            client = openai.OpenAI(base_url=self.model.openai_base_url, api_key=self.model.openai_api_key or "none")
            client.chat.completions.create(
                model=self.model.openai_model_name, n=self.task.repeat_times, temperature=1.0,
                messages=[{"role": "user", "content": self.task.prompt}],
            )
            experiences = self.model.extract_experience_from_history()
            for experience in experiences:
                experience.reward = max(0.0, 1.0 - len(experience.response_text) / 24)
            return experiences
    """
)
STEPS = 12


@pytest.mark.slow
def test_an_agent_workflow_over_http_learns(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_agent.py").write_text(AGENT_WORKFLOW)
    config = base_config(assets, tmp_path / "runs")
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    config["buffer"]["total_steps"] = STEPS
    config["buffer"]["batch_size"] = 8
    config["buffer"]["explorer_input"]["default_workflow_type"] = "short_agent"
    config["explorer"]["rollout_model"] = {"enable_openai_api": True, "enable_history": True}
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0
    records = read_metrics(tmp_path / "runs" / "e2e" / "run")
    rewards = [r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r]
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    assert len(rewards) == STEPS and len(trainer_steps) == STEPS
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"reward {first:.3f} -> {last:.3f}"
