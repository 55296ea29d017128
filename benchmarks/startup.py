"""Start-up: how long the command line takes before it does anything, and before a run's first step.

Every measurement is a fresh process, timed from outside (spawn to exit) or, for a run, by
the run itself (``time/startup``: the process's start to its first step, read from
``metrics.jsonl``). Measurements alternate and repeat; the table gives medians and ranges.

- ``interpreter``: ``python -c pass``, the floor of any command;
- ``CLI import``: import ``trivium.cli.main`` and build the parser with every subcommand,
  what each command pays before its own work;
- ``trivium plan``: load, resolve and check both stages of ``examples/quickstart.yaml``;
- ``first rollout``: ``trivium run`` of the quickstart's GRPO stage alone (``stages=[]``, no
  evaluation sets, one step) on a fresh tiny model: ``time/startup`` is the time from the
  process's start to the first explorer step, the first rollout of the run;
- ``first step on Ray``: the same for ``examples/ray_both.yaml`` (the quickstart task on a
  local Ray, ``both``, two rollout engines), as it runs (the engines inside the explorer's
  actor) and with an actor per engine (``cluster.engines_in_explorer=false``, as on GPUs);
- ``torch + transformers floor``: a bare script that imports torch and transformers and loads
  the same tokenizer and model, timed the same way, and split into those three parts: what
  any run that trains the model in its own process pays, trivium or not;
- ``floor, collector paused``: the same script with Python's cyclic garbage collector off, as
  trivium keeps it while a run starts (``trivium/runtime/startup_collector.py``).

trivium's modules are compiled first (``compileall``), and every process may write bytecode:
what a user's second run finds, since Python caches a module's bytecode on its first import.

    python benchmarks/startup.py [--repeats 5]

Writes benchmarks/results/startup.md.
"""

from __future__ import annotations

import argparse
import compileall
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
RESULTS_FILE = Path(__file__).parent / "results" / "startup.md"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
RAY_BOTH = ROOT / "examples" / "ray_both.yaml"
# The quickstart's GRPO stage alone, one step, nothing evaluated: the run ends soon after its first rollout.
FIRST_ROLLOUT_OVERRIDES = [
    "stages=[]", "buffer.total_steps=1", "explorer.eval_on_startup=false", "buffer.explorer_input.eval_tasksets=[]",
    "trainer.save_hf_checkpoint=never",
]
FLOOR_SCRIPT = """
import gc, sys, time
from trivium.runtime.startup import process_started_at
if sys.argv[2:] == ["paused"]:
    gc.disable()
marks = [time.time()]
import torch
marks.append(time.time())
from transformers import AutoModelForCausalLM, AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1])  # imports the model type's configuration code
marks.append(time.time())
AutoModelForCausalLM.from_pretrained(sys.argv[1])
marks.append(time.time())
started = process_started_at()
print(marks[-1] - started, *(later - earlier for earlier, later in zip(marks, marks[1:])))
"""

# What floor_seconds returns, in its order.
FLOOR_PARTS = (
    "torch + transformers floor", "floor: import torch", "floor: import transformers, load the tokenizer",
    "floor: load the model",
)


def environment() -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**variables, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def wall_seconds(command: list[str], cwd: Path) -> float:
    """Seconds from spawning ``command`` to its exit."""
    began = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=environment(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def first_rollout_seconds(model: Path, data: Path, run_root: Path, config: Path = QUICKSTART,
                          *overrides: str) -> tuple[float, float]:
    """(time/startup the run logged, the whole run's wall seconds) of one short run of ``config``
    (a recipe of the quickstart project)."""
    env = {**environment(), "TRIVIUM_MODEL_PATH": str(model), "TRIVIUM_DATA_PATH": str(data),
           "TRIVIUM_CHECKPOINT_ROOT_DIR": str(run_root)}
    env.pop("RAY_ADDRESS", None)  # a Ray recipe starts its own local Ray, as on a user's machine
    run_root.mkdir(parents=True)
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trivium.cli.main", "run", "--config", str(config), *FIRST_ROLLOUT_OVERRIDES,
         *overrides],
        cwd=run_root, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - began
    (metrics,) = run_root.glob("quickstart/*/metrics.jsonl")
    startups = [record["time/startup"] for record in map(json.loads, metrics.read_text().splitlines())
                if "time/startup" in record]
    if len(startups) != 1:
        raise RuntimeError(f"expected one time/startup in {metrics}, found {startups}")
    return startups[0], wall


def floor_seconds(model: Path, cwd: Path, *, collector: str = "on") -> list[float]:
    """[process start to done, torch import, transformers import and tokenizer, model] in seconds,
    with the garbage collector ``on`` or ``paused``."""
    completed = subprocess.run(
        [sys.executable, "-c", FLOOR_SCRIPT, str(model), collector], cwd=cwd, env=environment(), check=True,
        capture_output=True, text=True,
    )
    return [float(value) for value in completed.stdout.splitlines()[-1].split()]


def build_assets(work: Path) -> tuple[Path, Path]:
    model, data = work / "model", work / "data"
    python = [sys.executable, "-m", "trivium.cli.main"]
    for command in (
        [*python, "init", "model", "--preset", "tiny", "--out", str(model)],
        [*python, "init", "data", "--task", "arithmetic", "--out", str(data), "--num-train", "2000", "--num-test", "200"],
    ):
        subprocess.run(command, cwd=work, env=environment(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return model, data


def measure(repeats: int, work: Path) -> dict[str, list[float]]:
    model, data = build_assets(work)
    python = sys.executable
    samples: dict[str, list[float]] = {name: [] for name in (
        "interpreter", "CLI import", "trivium plan", "first rollout", "first rollout: whole run",
        "first step on Ray", "first step on Ray, an actor per engine", *FLOOR_PARTS, "floor, collector paused",
    )}
    for repeat in range(repeats):
        samples["interpreter"].append(wall_seconds([python, "-c", "pass"], work))
        samples["CLI import"].append(wall_seconds(
            [python, "-c", "from trivium.cli.main import build_parser; build_parser()"], work))
        samples["trivium plan"].append(wall_seconds(
            [python, "-m", "trivium.cli.main", "plan", "--config", str(QUICKSTART)], work))
        startup, whole = first_rollout_seconds(model, data, work / f"run_{repeat}")
        samples["first rollout"].append(startup)
        samples["first rollout: whole run"].append(whole)
        samples["first step on Ray"].append(first_rollout_seconds(model, data, work / f"ray_{repeat}", RAY_BOTH)[0])
        samples["first step on Ray, an actor per engine"].append(first_rollout_seconds(
            model, data, work / f"ray_actors_{repeat}", RAY_BOTH, "cluster.engines_in_explorer=false")[0])
        floor = floor_seconds(model, work)
        for name, value in zip(FLOOR_PARTS, floor, strict=True):
            samples[name].append(value)
        samples["floor, collector paused"].append(floor_seconds(model, work, collector="paused")[0])
        print(f"repeat {repeat + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in samples.items()), flush=True)
    return samples


HOW = {
    "interpreter": "`python -c pass`, spawn to exit",
    "CLI import": "`python -c \"from trivium.cli.main import build_parser; build_parser()\"`, spawn to exit",
    "trivium plan": "`python -m trivium.cli.main plan --config examples/quickstart.yaml` (2 stages), spawn to exit",
    "first rollout": "`time/startup` of `trivium run` on the quickstart's GRPO stage: process start to the first "
                     "explorer step",
    "first rollout: whole run": "the same run, spawn to exit (one step, a final checkpoint, plots and report)",
    "first step on Ray": "`time/startup` of `trivium run` on `examples/ray_both.yaml`'s GRPO stage (the same "
                         "overrides): a local Ray started, the explorer's actor hosting both engines and the "
                         "experience queue, the trainer's actor",
    "first step on Ray, an actor per engine": "the same with `cluster.engines_in_explorer=false`: an actor for each "
                                              "of the two engines as well, as on GPUs",
    "torch + transformers floor": "a bare script: import torch and transformers, load the tiny tokenizer and "
                                  "model; process start to done",
    "floor: import torch": "its `import torch`",
    "floor: import transformers, load the tokenizer": "its `from transformers import ...` and "
                                                      "`AutoTokenizer.from_pretrained` (which imports the model "
                                                      "type's configuration code, and with it most of transformers)",
    "floor: load the model": "its `AutoModelForCausalLM.from_pretrained` (the model's code and weights)",
    "floor, collector paused": "the same script with `gc.disable()` first; process start to done",
}


def render(samples: dict[str, list[float]], repeats: int) -> str:
    lines = [
        "# Start-up: the command line and the first rollout",
        "",
        describe(torch=version("torch"), transformers=version("transformers")),
        "",
        (f"`python benchmarks/startup.py --repeats {repeats}`: each measurement a fresh process, the kinds "
         f"alternating, {repeats} rounds. First-rollout run: `{' '.join(FIRST_ROLLOUT_OVERRIDES)}` on a fresh "
         "`trivium init model --preset tiny`."),
        "",
        "| what | median | range | how |",
        "| --- | --- | --- | --- |",
    ]
    for name, values in samples.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} s | {min(values):.2f}-{max(values):.2f} s "
                     f"| {HOW[name]} |")
    first_rollout = statistics.median(samples["first rollout"])
    trivium_share = first_rollout - statistics.median(samples["floor, collector paused"])
    collector_share = (statistics.median(samples["torch + transformers floor"])
                       - statistics.median(samples["floor, collector paused"]))
    lines += [
        "",
        (f"Pausing the garbage collector takes {collector_share:.2f} s off the floor. Of the first rollout's "
         f"median, {trivium_share:.2f} s is above the floor with the collector paused, as trivium starts: the "
         "config checks, trivium's own imports, and building the trainer and the rollout engine."),
        "",
        (f"On Ray the first step comes {statistics.median(samples['first step on Ray']) - first_rollout:.2f} s "
         "later than in one process: `ray.init` of a local Ray (2.5-4 s on 2 cores, most of it waiting for Ray's "
         "own processes: its API server, then the raylet's registration, which Ray polls for once a second; "
         "`trivium run` imports its runtime meanwhile), then the two actors' processes, each importing torch and "
         "transformers and building its side on a core of its own."),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS_FILE)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "trivium", quiet=1)
    with tempfile.TemporaryDirectory() as work:
        samples = measure(args.repeats, Path(work))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(samples, args.repeats))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
