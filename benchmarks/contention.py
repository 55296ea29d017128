"""A busy machine: how much slower a GRPO step gets beside other work, trivium against TRL.

The quickstart's GRPO stage (the time-to-target task: two-digit addition, the tiny model from
the shared SFT checkpoint, 16 prompts x 8 answers per step, ``colocate``) runs for a fixed
number of steps, once on a quiet machine and once beside ``--load`` busy processes of a load
generator (each one spins a core in pure Python, as a data-preparation job or another user's
script does). Each system's slowdown is its median step time under load over its quiet one.

Every system runs with torch's default thread count (the machine's cores) and these
OpenMP waiting settings (``trivium/runtime/openmp_defaults.py`` explains them):

* trivium as it starts by itself: ``GOMP_SPINCOUNT=30000``, an idle thread spins about 0.3 ms;
* trivium spinning without end (``OMP_WAIT_POLICY=ACTIVE``) and never (``PASSIVE``);
* TRL's ``GRPOTrainer`` as shipped (GNU OpenMP's default, about 3 ms of spinning), and TRL
  given trivium's setting: the fair peer, with the one setting that belongs to neither
  system's model code.

Quiet and loaded runs alternate, the systems' order rotates between rounds; the table gives
medians over rounds and the load average measured during each condition.

    python benchmarks/contention.py [--rounds 2] [--steps 20] [--load 2]

Writes benchmarks/results/contention.md (and the raw runs as JSON next to it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TTT = HERE / "time_to_target"
sys.path.insert(0, str(TTT))
sys.path.insert(0, str(HERE))

import common  # noqa: E402
from machine import describe  # noqa: E402

RESULTS = HERE / "results"
# name: (script, extra arguments, environment changes)
SYSTEMS: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "trivium": ("trivium_run.py", ["--mode", "colocate"], {}),
    "trivium_active": ("trivium_run.py", ["--mode", "colocate"], {"OMP_WAIT_POLICY": "ACTIVE"}),
    "trivium_passive": ("trivium_run.py", ["--mode", "colocate"], {"OMP_WAIT_POLICY": "PASSIVE"}),
    "trl": ("trl_run.py", [], {}),
    "trl_spin": ("trl_run.py", [], {"GOMP_SPINCOUNT": "30000"}),
}
LABELS = {
    "trivium": "trivium colocate (its own choice: GOMP_SPINCOUNT=30000)",
    "trivium_active": "trivium colocate + OMP_WAIT_POLICY=ACTIVE (spin without end)",
    "trivium_passive": "trivium colocate + OMP_WAIT_POLICY=PASSIVE (never spin)",
    "trl": "TRL GRPOTrainer (as shipped: OpenMP's default, about 3 ms of spinning)",
    "trl_spin": "TRL GRPOTrainer + GOMP_SPINCOUNT=30000 (trivium's setting)",
}
# One busy core: a pure-Python loop that never sleeps.
SPINNER = "while True:\n    pass\n"


class LoadGenerator:
    """``count`` processes that each keep one core busy until stopped."""

    def __init__(self, count: int):
        self.count = count
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> LoadGenerator:
        self.processes = [subprocess.Popen([sys.executable, "-c", SPINNER]) for _ in range(self.count)]
        time.sleep(1.0)  # let the scheduler see them busy before the run starts
        return self

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()


def load_average_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_one(system: str, condition: str, round_index: int, *, model: Path, data: Path, steps: int,
            load: int, raw_dir: Path) -> dict:
    script, extra, env_changes = SYSTEMS[system]
    name = f"{system}_{condition}_round{round_index}"
    args = [*extra, "--model", str(model), "--data", str(data), "--seed", str(round_index), "--max-steps", str(steps)]
    out, log = raw_dir / f"{name}.json", raw_dir / f"{name}.log"
    env = {**os.environ, "TQDM_DISABLE": "1", **env_changes}
    for key in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):  # each system's own choice, unless set here
        if key not in env_changes:
            env.pop(key, None)
    load_samples: list[float] = []
    start = time.time()
    with LoadGenerator(load if condition == "loaded" else 0):
        with open(log, "w") as handle:
            process = subprocess.Popen([sys.executable, str(TTT / script), *args, "--out", str(out)], cwd=ROOT,
                                       stdout=handle, stderr=subprocess.STDOUT, env=env)
            while process.poll() is None:
                time.sleep(5.0)
                load_samples.append(load_average_1min())
    if process.returncode != 0:
        raise SystemExit(f"{LABELS[system]} ({condition}) failed (exit {process.returncode}); see {log}")
    result = common.RunResult.load(out)
    step = result.median_step_seconds()
    print(f"{LABELS[system]}, {condition}, round {round_index}: {step:.3f} s per step over {len(result.steps)} steps; "
          f"{time.time() - start:.0f}s total", flush=True)
    return {"system": system, "condition": condition, "round": round_index, "step_seconds": step,
            "steps": len(result.steps), "load_average": statistics.fmean(load_samples) if load_samples else None}


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def report(runs: list[dict], *, steps: int, load: int, rounds: int, versions: dict[str, str]) -> str:
    lines = [
        "# Contention: step time on a busy machine, trivium against TRL",
        "",
        f"`python benchmarks/contention.py --rounds {rounds} --steps {steps} --load {load}`: the quickstart's GRPO "
        f"stage (two-digit addition, tiny model from the shared SFT checkpoint, {common.PROMPTS_PER_STEP} prompts x "
        f"{common.GROUP_SIZE} answers per step, `colocate` for trivium) for {steps} steps, quiet and beside {load} "
        "processes that each spin a core in pure Python. Step time: median wall time between steps after the "
        "first. Slowdown: loaded step time / quiet step time, per round, median over rounds (each round's in "
        "brackets). Load average: the 1-minute load average sampled every 5 s during the runs, mean; "
        "it counts the run's own threads and lags behind the condition (runs last 15-60 s).",
        "",
        f"Machine: {describe(**versions)}.",
        "",
        "| system | quiet step (s) | loaded step (s) | slowdown | load average quiet / loaded |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for system in SYSTEMS:
        mine = [r for r in runs if r["system"] == system]
        if not mine:
            continue
        quiet = {r["round"]: r for r in mine if r["condition"] == "quiet"}
        loaded = {r["round"]: r for r in mine if r["condition"] == "loaded"}
        ratios = [loaded[i]["step_seconds"] / quiet[i]["step_seconds"] for i in sorted(quiet) if i in loaded]
        lines.append(
            f"| {LABELS[system]} | {median(r['step_seconds'] for r in quiet.values()):.3f} | "
            f"{median(r['step_seconds'] for r in loaded.values()):.3f} | "
            f"{median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)}) | "
            f"{median(r['load_average'] for r in quiet.values()):.2f} / "
            f"{median(r['load_average'] for r in loaded.values()):.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps per run")
    parser.add_argument("--load", type=int, default=2, help="busy processes beside each loaded run")
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / ".work")
    parser.add_argument("--output", type=Path, default=RESULTS / "contention.md")
    args = parser.parse_args()

    from run import prepare_assets  # time_to_target/run.py: the model, data and shared start checkpoint

    model, start = prepare_assets(args.work_dir)
    print(f"every system starts from SFT step {start['sft_step']}", flush=True)
    raw_dir = args.work_dir / "contention_runs"
    raw_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    for round_index in range(args.rounds):
        shift = round_index % len(args.systems)
        for system in args.systems[shift:] + args.systems[:shift]:
            for condition in ("quiet", "loaded") if round_index % 2 == 0 else ("loaded", "quiet"):
                runs.append(run_one(system, condition, round_index, model=model, data=args.work_dir / "data",
                                    steps=args.steps, load=args.load, raw_dir=raw_dir))
    from importlib.metadata import version

    versions = {name: version(name) for name in ("torch", "transformers", "trl")}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report(runs, steps=args.steps, load=args.load, rounds=args.rounds, versions=versions))
    args.output.with_suffix(".json").write_text(json.dumps(runs, indent=1))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
