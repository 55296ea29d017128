"""The quickstart as `make demo` runs it: how much each stage adds, and how long it takes.

Each run is ``trivium run --config examples/quickstart.yaml`` in a fresh process, on the model
and data `make demo` builds (``trivium init model --preset tiny``, ``trivium init data --task
arithmetic --num-train 2000 --num-test 200``), with a seed and a thread count:

- ``auto``: no thread setting, as `make demo` runs (trivium picks the threads from the cores
  it may use);
- a number: ``OMP_NUM_THREADS``, e.g. 1, the tests' setting.

Where the SFT warm-up ends moves with the seed and the floating-point order (the thread count),
so the table gives each run's held-out greedy accuracy after the warm-up (the GRPO stage's
evaluation at its step 0) and after GRPO, GRPO's gain, and the run's wall time, spawn to exit.
Runs are one after another, alone on the machine.

    python benchmarks/quickstart.py [--runs 0:auto 0:1 1:1 2:1 3:1]

Writes benchmarks/results/quickstart.md and quickstart.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from machine import describe  # benchmarks/, the script's own folder, is on sys.path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
RECIPE = ROOT / "examples" / "quickstart.yaml"
TRIVIUM = [sys.executable, "-m", "trivium.cli.main"]
ACCURACY = "eval/arithmetic_test/accuracy"
GOAL_POINTS = 20.0


def build_inputs(work: Path) -> dict[str, str]:
    """The model and data `make demo` builds, as the recipe's environment variables."""
    model, data = work / "models" / "tiny", work / "data" / "arithmetic"
    subprocess.run([*TRIVIUM, "init", "model", "--preset", "tiny", "--out", str(model)], check=True, capture_output=True)
    subprocess.run(
        [*TRIVIUM, "init", "data", "--task", "arithmetic", "--out", str(data), "--num-train", "2000", "--num-test", "200"],
        check=True, capture_output=True,
    )
    return {"TRIVIUM_MODEL_PATH": str(model), "TRIVIUM_DATA_PATH": str(data)}


def run_once(seed: int, threads: str, inputs: dict[str, str], work: Path) -> dict:
    root = work / f"runs_seed{seed}_threads{threads}"
    env = {**os.environ, **inputs, "TRIVIUM_CHECKPOINT_ROOT_DIR": str(root)}
    env.pop("OMP_NUM_THREADS", None)
    if threads != "auto":
        env["OMP_NUM_THREADS"] = threads
    began = time.perf_counter()
    done = subprocess.run([*TRIVIUM, "run", "--config", str(RECIPE), f"seed={seed}"], env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"seed {seed}, threads {threads}: exit {done.returncode}\n{done.stderr[-3000:]}")
    metrics = (root / "quickstart" / "arithmetic" / "grpo" / "metrics.jsonl").read_text().splitlines()
    evals = [(record["step"], record[ACCURACY]) for record in map(json.loads, metrics) if ACCURACY in record]
    return {"seed": seed, "threads": threads, "sft_end": evals[0][1], "grpo_end": evals[-1][1],
            "grpo_steps": evals[-1][0], "seconds": seconds}


def render(runs: list[dict], command: str) -> str:
    gains = [100 * (run["grpo_end"] - run["sft_end"]) for run in runs]
    reached = sum(gain >= GOAL_POINTS for gain in gains)
    lines = [
        "# The quickstart: what each stage adds",
        "",
        describe(torch=version("torch"), transformers=version("transformers")),
        "",
        (f"`{command}`: `examples/quickstart.yaml` as `make demo` runs it, one run after another; held-out greedy "
         "accuracy on 200 questions after the SFT warm-up and after GRPO."),
        "",
        "| seed | threads | after SFT | after GRPO | GRPO's gain | wall time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run, gain in zip(runs, gains):
        lines.append(f"| {run['seed']} | {run['threads']} | {100 * run['sft_end']:.1f}% | {100 * run['grpo_end']:.1f}% "
                     f"| {gain:+.1f} points | {run['seconds']:.0f} s |")
    lines += [
        "",
        (f"GRPO's gain: median {statistics.median(gains):+.1f} points, {min(gains):+.1f} to {max(gains):+.1f}; "
         f"at least {GOAL_POINTS:.0f} points in {reached} of {len(runs)} runs. Wall time: median "
         f"{statistics.median(run['seconds'] for run in runs):.0f} s."),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", default=["0:auto", "0:1", "1:1", "2:1", "3:1"],
                        help="seed:threads, threads a number or auto (as make demo)")
    parser.add_argument("--out", type=Path, default=RESULTS / "quickstart.md")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as work:
        inputs = build_inputs(Path(work))
        for spec in args.runs:
            seed, _, threads = spec.partition(":")
            runs.append(run_once(int(seed), threads or "auto", inputs, Path(work)))
            print(json.dumps(runs[-1]), flush=True)
    command = "python benchmarks/quickstart.py --runs " + " ".join(args.runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(runs, command))
    args.out.with_suffix(".json").write_text(json.dumps(runs, indent=2) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
