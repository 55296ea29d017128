"""How cost grows: rollout tokens/s, train tokens/s, step time and peak RSS as the work grows,
trivium beside TRL's ``GRPOTrainer``.

From a base point (the tiny model, responses of 64 tokens, groups of 8, 8 prompts per step:
64 rows), one axis at a time varies:

- model size: tiny (~0.8M), small (~6M) and a ~25M-parameter decoder (hidden 512, 8 layers);
- response length: 16, 64, 128, 256, 512 tokens (every response forced to exactly that);
- group size: 4, 8, 16, 32 samples per prompt (32 to 256 rows);
- batch: 8, 32, 128 prompts per step (64 to 1024 rows).

The base point is the tiny model so that the largest point of every axis (1024 rows, or
512-token responses) fits in the time budget on a 2-core CPU; the model axis alone shows the
larger models, at the base point's 64 rows of 64 tokens.

Each system runs each point in a process of its own (``scaling/trivium_point.py``,
``scaling/trl_point.py``), so the peak RSS is the point's own: one warm-up step, then two
timed steps; which system goes first alternates from point to point, and the whole sweep
runs twice, the second round backwards. Every worker runs one torch thread (``--threads``):
on cores shared with other jobs a second OpenMP thread that loses its core stalls every
parallel region, which made single steps up to 20x slower in a trial. trivium's step is the
``hf`` engine's rollout, ``Trainer.train_step`` (GRPO) and the weight hand-back, with every
stage timed (the "where the time goes" table). TRL's step is timed between its
``on_step_end`` callbacks, its rollout by wrapping ``_generate_and_score_completions``.

Budget: the full sweep (12 distinct points, 2 rounds, 48 processes) must stay under 30
minutes on a 2-core machine; it took 17.9 minutes on the shared AMD EPYC the results come
from (one round about 9). ``--quick`` (4 tiny points, one round) takes about a minute, and
``--axes`` measures only the given axes, keeping the saved measurements of the others.

    python benchmarks/scaling.py [--quick] [--axes model length group batch] [--rounds N] [--report-only]

Writes benchmarks/results/scaling.md, scaling.json and scaling_<axis>.png (``--quick``:
scaling_quick.*).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "scaling"))

import points
import render
from machine import describe

RESULTS = HERE / "results"
WORKERS = {"trivium": HERE / "scaling" / "trivium_point.py", "trl": HERE / "scaling" / "trl_point.py"}
FULL = {
    "base": points.Point(model="tiny", response_tokens=64, group_size=8, prompts_per_step=8),
    "axes": {"model": ["tiny", "small", "25m"], "length": [16, 64, 128, 256, 512], "group": [4, 8, 16, 32],
             "batch": [8, 32, 128]},
    "warmup_steps": 1,
    "timed_steps": 2,
    "rounds": 2,
}
QUICK = {
    "base": points.Point(model="tiny", response_tokens=16, group_size=4, prompts_per_step=4),
    "axes": {"model": ["tiny"], "length": [16, 32], "group": [4, 8], "batch": [4, 8]},
    "warmup_steps": 1,
    "timed_steps": 2,
    "rounds": 1,
}
POINT_TIMEOUT_S = 600  # one system at one point; beyond it the point counts as infeasible for that system


def sweep_points(plan: dict, axes: list[str]) -> list[points.Point]:
    """Every distinct point of the chosen axes, in axis order (the base point once)."""
    seen: dict[str, points.Point] = {}
    base = asdict(plan["base"])
    for axis in axes:
        for values in render.axis_points(base, axis, plan["axes"][axis]):
            point = points.Point(**values)
            seen.setdefault(point.key, point)
    return list(seen.values())


def run_system(system: str, point: points.Point, plan: dict, work: Path, threads: int) -> dict:
    """One system at one point, in its own process; its Measurement as a dict (with an error if it failed)."""
    out = work / f"{system}-{point.key}.json"
    log = work / f"{system}-{point.key}.log"
    out.unlink(missing_ok=True)
    command = [sys.executable, str(WORKERS[system]), *point.to_args(), "--warmup-steps", str(plan["warmup_steps"]),
               "--timed-steps", str(plan["timed_steps"]), "--out", str(out)]
    start = time.time()
    try:
        with open(log, "w") as handle:
            code = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, timeout=POINT_TIMEOUT_S, check=False,
                                  env=dict(os.environ, TQDM_DISABLE="1", OMP_NUM_THREADS=str(threads),
                                           MKL_NUM_THREADS=str(threads))).returncode
        error = "" if code == 0 and out.exists() else f"failed (exit {code}; see {log.name})"
    except subprocess.TimeoutExpired:
        error = f"infeasible: over {POINT_TIMEOUT_S} s"
    if error:
        measurement = asdict(points.Measurement(system=system, point=asdict(point), error=error))
    else:
        measurement = asdict(points.Measurement.load(out))
    seconds = measurement["step_seconds"]
    summary = error or f"steps {', '.join(f'{s:.2f}' for s in seconds)} s"
    print(f"{system:8s} {point.key:22s} {summary} ({time.time() - start:.0f} s with start-up)", flush=True)
    return measurement


def run_sweep(plan: dict, axes: list[str], threads: int, rounds: int) -> list[dict]:
    """Every point of the sweep ``rounds`` times; each round walks the points in the opposite
    direction to the one before, and the system that goes first alternates at every point."""
    todo = sweep_points(plan, axes)
    for name in {p.model for p in todo}:
        points.model_dir(name)  # build the models before any timing, once
    work = points.WORK / "runs"
    work.mkdir(parents=True, exist_ok=True)
    measurements = []
    turn = 0
    for round_index in range(rounds):
        print(f"== round {round_index + 1} of {rounds}", flush=True)
        for point in todo if round_index % 2 == 0 else todo[::-1]:
            order = ["trivium", "trl"] if turn % 2 == 0 else ["trl", "trivium"]
            turn += 1
            for system in order:
                measurement = run_system(system, point, plan, work, threads)
                measurements.append(dict(measurement, round=round_index))
    return measurements


def merged(previous: dict | None, measurements: list[dict]) -> list[dict]:
    """The new measurements, plus earlier ones of points this run did not measure."""
    fresh = {(m["system"], render.point_key(m["point"])) for m in measurements}
    # A point measured again replaces every earlier round of it.
    kept = [m for m in (previous or {}).get("measurements", [])
            if (m["system"], render.point_key(m["point"])) not in fresh]
    return kept + measurements


def versions() -> dict[str, str]:
    import torch
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def write_report(data: dict, stem: str) -> Path:
    path = RESULTS / f"{stem}.md"
    path.write_text(render.render(data, RESULTS, stem))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few tiny points, for a smoke check (< 3 min)")
    parser.add_argument("--axes", nargs="+", choices=list(render.AXIS_FIELDS), default=list(render.AXIS_FIELDS))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch (OpenMP) threads of every worker (default 1: steady under other load)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="times every point is run by each system (default 2; --quick 1)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the saved JSON")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    stem = "scaling_quick" if args.quick else "scaling"
    json_path = RESULTS / f"{stem}.json"
    previous = json.loads(json_path.read_text()) if json_path.exists() else None
    if args.report_only:
        if previous is None:
            parser.error(f"{json_path} does not exist; run the benchmark first")
        print(write_report(previous, stem).read_text())
        return 0

    began = time.time()
    rounds = args.rounds or plan["rounds"]
    measurements = run_sweep(plan, args.axes, args.threads, rounds)
    same_plan = previous is not None and previous.get("base") == asdict(plan["base"])
    axes = dict(previous["axes"]) if same_plan else {}
    axes.update({axis: plan["axes"][axis] for axis in args.axes})
    data = {
        "machine": describe(**versions()),
        "command": "python benchmarks/scaling.py" + (" --quick" if args.quick else "")
        + ("" if args.axes == list(render.AXIS_FIELDS) else " --axes " + " ".join(args.axes)),
        "minutes": (time.time() - began) / 60,
        "quick": args.quick,
        "base": asdict(plan["base"]),
        "axes": {axis: axes[axis] for axis in render.AXIS_FIELDS if axis in axes},
        "threads": args.threads,
        "rounds": rounds,
        "warmup_steps": plan["warmup_steps"],
        "timed_steps": plan["timed_steps"],
        "measurements": merged(previous if same_plan else None, measurements),
        "notes": previous.get("notes", []) if same_plan else [],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=1))
    print(write_report(data, stem).read_text())
    print(f"wrote {json_path} and {stem}.md in {data['minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
