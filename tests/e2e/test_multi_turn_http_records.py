"""A multi-turn agent over the workflow HTTP endpoint (``enable_openai_api`` + ``enable_history``)
writes exactly one experience per episode: ``batch_size x repeat_times`` a step.

Greedy sampling makes the concurrent episodes of a task say the same thing turn after turn,
and a barrier has all of them take their first turn before any continues, so each episode's
later turns are sent while the others' equal conversations are remembered too.
"""

import textwrap

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

BATCH_SIZE, REPEAT_TIMES, TURNS = 2, 4, 3

AGENT_WORKFLOW = textwrap.dedent(
    f"""
    import threading

    import openai

    from trivium.workflows.base import Workflow
    from trivium.workflows.registry import WORKFLOWS

    TURNS = {TURNS}
    _first_turns_done: dict[str, threading.Barrier] = {{}}
    _lock = threading.Lock()


    def first_turns_done(task_id: str) -> threading.Barrier:
        with _lock:
            return _first_turns_done.setdefault(task_id, threading.Barrier({REPEAT_TIMES}))


    @WORKFLOWS.register("greedy_walker")
    class GreedyWalker(Workflow):
        can_repeat = False  # one episode per workflow, its repeats run at once (multi-threading)

        def run(self):
            client = openai.OpenAI(base_url=self.model.openai_base_url, api_key=self.model.openai_api_key or "none",
                                   max_retries=0)
            messages = [{{"role": "user", "content": self.task.prompt}}]
            for turn in range(TURNS):
                reply = client.chat.completions.create(
                    model=self.model.openai_model_name, messages=messages, temperature=0.0, max_tokens=3,
                ).choices[0].message
                if turn == 0:
                    first_turns_done(self.task.task_id).wait(timeout=60)
                messages += [reply.model_dump(exclude_none=True), {{"role": "user", "content": "Go on."}}]
            experiences = self.model.extract_experience_from_history()
            for experience in experiences:
                experience.reward = float(experience.info["model_turns"] == TURNS)
            return experiences
    """
)


def test_every_concurrent_multi_turn_episode_over_http_is_one_experience(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "greedy_walker.py").write_text(AGENT_WORKFLOW)
    config = base_config(assets, tmp_path / "runs")
    config["model"].update({"max_prompt_tokens": 64, "max_model_len": 96})
    config["algorithm"]["repeat_times"] = REPEAT_TIMES
    config["buffer"]["batch_size"] = BATCH_SIZE
    config["buffer"]["total_steps"] = 2
    config["buffer"]["explorer_input"]["default_workflow_type"] = "greedy_walker"
    config["explorer"].update({"runner_per_model": BATCH_SIZE, "concurrent_mode": "multi-threading"})
    config["explorer"]["rollout_model"] = {"enable_openai_api": True, "enable_history": True}
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0

    records = read_metrics(tmp_path / "runs" / "e2e" / "run")
    explored = [r for r in records if r["role"] == "explorer" and "rollout/num_experiences" in r]
    assert [r["rollout/num_experiences"] for r in explored] == [BATCH_SIZE * REPEAT_TIMES] * 2
    # Every experience is a whole episode: none is a first turn left behind.
    assert [r["rollout/reward_min"] for r in explored] == [1.0, 1.0]
    assert all(r["rollout/failed_tasks"] == 0 and r["rollout/filtered_experiences"] == 0 for r in explored)
    trained = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    assert len(trained) == 2
