"""``trivium debug``: serve the model in one process, run a task's workflow from another, view it."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from trivium.buffer.sql_schema import ExperienceModel
from trivium.cli.main import main
from trivium.models.engine import create_engine as create_inference_engine
from trivium.models.server import free_port, serve_in_thread

from .conftest import debug_config


def stored_experiences(database: Path) -> list:
    session = sessionmaker(bind=create_engine(f"sqlite:///{database}"))()
    try:
        return [row.to_experience() for row in session.query(ExperienceModel).order_by(ExperienceModel.id)]
    finally:
        session.close()


def wait_for_health(port: int, process: subprocess.Popen, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited early:\n{process.stdout.read()}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("the debug server did not answer /health in time")


@pytest.mark.slow
def test_two_process_debug_session_writes_token_exact_experiences(debug_assets, tmp_path, capsys):
    config = debug_config(debug_assets, tmp_path)
    port, output_dir = free_port(), tmp_path / "debug_out"
    server = subprocess.Popen(
        [sys.executable, "-m", "trivium.cli.main", "debug", "--config", config, "--module", "inference_model",
         "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        health = wait_for_health(port, server)
        assert health["status"] == "ok" and health["model_path"] == debug_assets["model"]

        common = ["debug", "--config", config, "--port", str(port), "--output-dir", str(output_dir)]
        assert main(common + ["--module", "workflow", "--task-index", "1"]) == 0
        shown = capsys.readouterr().out
        database = output_dir / "debug_experiences.db"
        assert "task arith:1:0:1: workflow 'math'" in shown and "3 experience(s); reward mean" in shown
        assert f"trivium view --db {database}" in shown

        experiences = stored_experiences(database)
        assert len(experiences) == 3  # algorithm.repeat_times
        assert [e.run_id for e in experiences] == [0, 1, 2]
        assert all(e.task_id == "arith:1:0:1" and e.info["task_index"] == 1 for e in experiences)
        question = experiences[0].prompt_text.split("What is ", 1)[1].split("?")[0]
        assert f"What is {question}?" in shown  # the printed prompt is the stored one
        tokenizer = create_inference_engine("hf", model_path=debug_assets["model"]).tokenizer
        for experience in experiences:
            assert experience.reward is not None and "accuracy" in experience.metrics
            assert 1 <= experience.response_length <= 8  # model.max_response_tokens
            assert experience.logprobs.shape == (experience.response_length,)
            assert bool((experience.logprobs < 0).all())
            response_ids = experience.response_tokens.tolist()
            assert tokenizer.decode(response_ids, skip_special_tokens=True) == experience.response_text
        # Token-exact: the server's scoring of the stored tokens reproduces the stored logprobs.
        first = experiences[0]
        scored = httpx.post(f"http://127.0.0.1:{port}/v1/trivium/logprobs", json={
            "sequences": [first.tokens.tolist()], "prompt_lengths": [first.prompt_length]}).json()["logprobs"][0]
        assert scored == pytest.approx(first.logprobs.tolist(), abs=1e-4)

        assert main(common + ["--module", "viewer"]) == 0
        table = capsys.readouterr().out
        assert f"3 experience(s) in {database}" in table
        assert table.count("│ debug ") == 3
    finally:
        server.send_signal(signal.SIGINT)  # what Ctrl-C sends
        try:
            server_log = server.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert server.returncode == 0, server_log
    assert f"serving {debug_assets['model']} at http://127.0.0.1:{port}/v1" in server_log
    assert "model server stopped" in server_log


COUNTING_WORKFLOW = textwrap.dedent(
    '''
    from trivium.workflows import WORKFLOWS
    from trivium.workflows.base import Workflow


    @WORKFLOWS.register("response_length")
    class ResponseLength(Workflow):
        """Samples one reply per run; the reward is the number of response tokens."""

        def run(self):
            self.logger.info("running row %d", self.task.index)
            experience = self.model.chat([{"role": "user", "content": self.task.prompt}], max_tokens=5)[0]
            experience.reward = float(experience.response_length)
            experience.metrics["response_tokens"] = float(experience.response_length)
            return [experience]
    '''
)


@pytest.mark.slow
def test_a_plugin_workflow_runs_once_per_repeat_against_the_server(debug_assets, tmp_path, capsys):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "response_length.py").write_text(COUNTING_WORKFLOW)
    config = debug_config(debug_assets, tmp_path, default_workflow_type="response_length")
    engine = create_inference_engine("hf", model_path=debug_assets["model"], seed=0)
    with serve_in_thread(engine) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        args = ["debug", "--config", config, "--module", "workflow", "--port", port, "--output-dir", str(tmp_path)]
        assert main(args) == 2  # the workflow is unknown without its plugin directory
        assert "--plugin-dir" in capsys.readouterr().err
        assert main(args + ["--plugin-dir", str(plugins)]) == 0
    captured = capsys.readouterr()
    assert "[workflow INFO] running row 0" in captured.err
    experiences = stored_experiences(tmp_path / "debug_experiences.db")
    # The workflow cannot repeat itself, so it ran once per repeat, like the explorer's runners do.
    assert [e.run_id for e in experiences] == [0, 1, 2]
    for experience in experiences:
        assert experience.reward == experience.response_length == experience.metrics["response_tokens"]
        assert 1 <= experience.response_length <= 5


def test_workflow_without_a_server_says_to_start_one(debug_assets, tmp_path, capsys):
    config = debug_config(debug_assets, tmp_path)
    port = free_port()
    assert main(["debug", "--config", config, "--module", "workflow", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"no trivium model server answers at http://127.0.0.1:{port}/health" in err
    assert f"--module inference_model --port {port}" in err and "Traceback" not in err


def test_viewer_and_task_index_errors_name_the_fix(debug_assets, tmp_path, capsys):
    config = debug_config(debug_assets, tmp_path)
    assert main(["debug", "--config", config, "--module", "viewer", "--output-dir", str(tmp_path / "none")]) == 2
    assert "--module workflow" in capsys.readouterr().err
    assert main(["debug", "--config", config, "--module", "workflow", "--task-index", "8"]) == 2
    assert "use 0..7" in capsys.readouterr().err
