"""Start-up: `trivium plan` checks a whole config without importing the heavy packages a run needs.

Each test runs the command in a fresh interpreter (this process has imported everything
already) and lists the heavy packages found in ``sys.modules`` afterwards. Counting modules
instead of timing keeps the guard free of the machine's load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"

# Packages `trivium plan` has no use for; each costs from tens of milliseconds (numpy) to
# seconds (torch with transformers) to import.
HEAVY = (
    "torch", "transformers", "tokenizers", "safetensors", "numpy", "ray", "fastapi", "uvicorn", "httpx",
    "sqlalchemy", "datasets", "peft", "openai", "matplotlib", "rich",
)

RUN_COMMAND = """
import contextlib, io, json, sys
from trivium.cli.main import main
output = io.StringIO()
with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit:  # --help
        code = exit.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.stdin.read())))
print(json.dumps({"code": code, "output": output.getvalue(), "heavy": heavy}))
"""


def run_trivium(*args: str, cwd: Path) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", RUN_COMMAND, *args], input=json.dumps(HEAVY), capture_output=True, text=True,
        cwd=cwd, check=True, timeout=120,
    )
    return json.loads(completed.stdout.splitlines()[-1])


def test_plan_checks_the_quickstart_without_importing_torch_or_any_other_heavy_package(tmp_path):
    result = run_trivium("plan", "--config", str(QUICKSTART), cwd=tmp_path)
    assert result["code"] == 0, result["output"]
    # Both stages were resolved and checked, algorithm functions and workflows included.
    assert "== stage 2/2: grpo" in result["output"]
    assert "whole run: explorer 200 steps" in result["output"]
    assert result["heavy"] == []


def test_plan_names_the_closest_algorithm_function_without_importing_torch(tmp_path):
    result = run_trivium(
        "plan", "--config", str(QUICKSTART), "algorithm.advantage_fn=grpoo",
        "algorithm.policy_loss_fn_args.clip_rang=0.2", cwd=tmp_path,
    )
    assert result["code"] == 2
    assert "algorithm.advantage_fn: in stage 'grpo': Unknown advantage_fn 'grpoo'. Did you mean 'grpo'?" in result["output"]
    # The loss's signature was read to check its arguments.
    assert "unknown argument 'clip_rang'. Did you mean 'clip_range'?" in result["output"]
    assert result["heavy"] == []


def test_the_command_line_imports_no_heavy_package_before_a_command_runs(tmp_path):
    result = run_trivium("--help", cwd=tmp_path)
    assert result["code"] == 0
    assert "plan" in result["output"] and "run" in result["output"]
    assert result["heavy"] == []
