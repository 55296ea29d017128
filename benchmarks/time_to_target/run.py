"""Time to a target training reward: trivium (colocate, both) against TRL's GRPOTrainer.

Every system starts from the same SFT checkpoint of the tiny model and runs GRPO on a task
(``--task``: two-digit addition, or countdown, where RL does most of the work) with the
settings in ``common.py`` (group 8, 16 prompts per step, same temperature, no KL). First a
learning-rate sweep on a seed of its own gives TRL and trivium each its best rate (``--lr-sweep``;
trivium's is swept in ``colocate`` and used by every trivium system). Each run is its own
process; the systems take turns within each seed, and the order rotates between seeds, so
slow spells on the shared cores hit them alike.

    python benchmarks/time_to_target/run.py [--task arithmetic] [--seeds 0 1 2] [--max-steps 400] \
        [--systems trl colocate both] [--lr-sweep 1e-4 3e-4 1e-3]

Writes benchmarks/results/time_to_target.md (countdown: time_to_target_countdown.md), and the
raw runs as JSON next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for machine.py

import common  # noqa: E402
from machine import describe  # noqa: E402

RESULTS = HERE.parent / "results"
SYSTEMS = {
    "trl": ["trl_run.py"],
    "colocate": ["trivium_run.py", "--mode", "colocate"],
    "both": ["trivium_run.py", "--mode", "both"],
    # Ray start-up (about 10 s on 2 cores) is part of its time, as a user waits for it.
    "ray_both": ["trivium_run.py", "--mode", "both", "--placement", "ray", "--engines", "2"],
}
LABELS = {
    "trl": "TRL GRPOTrainer", "colocate": "trivium colocate", "both": "trivium both",
    "ray_both": "trivium both on Ray (explorer actor hosting 2 engines)",
}


def trivium_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "trivium.cli.main", *args], check=True, cwd=ROOT)


def prepare_assets(work: Path, task: common.Task = common.TASKS["arithmetic"]) -> tuple[Path, dict]:
    """The tiny model, the task's data and its starting checkpoint, under ``work``; built once,
    reused after. Returns the checkpoint every system starts from and how it was chosen.
    """
    work = work / task.work_subdir
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "model" / "config.json").exists():
        trivium_cli("init", "model", "--preset", "tiny", "--out", str(work / "model"))
    if not (work / "data" / "train.jsonl").exists():
        trivium_cli("init", "data", *task.data_args, "--out", str(work / "data"))
    chosen = work / "time_to_target" / "start.json"
    if chosen.exists():
        start = json.loads(chosen.read_text())
        start.setdefault("sampled_accuracy", start.get("sampled_reward"))  # written before the rename
        return work / start["checkpoint"], start
    sft_dir = work / "time_to_target" / "sft"
    if not any(sft_dir.glob("global_step_*/actor")):
        print("building the SFT checkpoints (once)", flush=True)
        env = dict(os.environ, TTT_WORK_DIR=str(work))
        subprocess.run([sys.executable, "-m", "trivium.cli.main", "run", "--config", str(HERE / task.sft_config)],
                       check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    start = choose_start_checkpoint(sft_dir, work / "data", task)
    chosen.write_text(json.dumps(start))
    return work / start["checkpoint"], start


def choose_start_checkpoint(sft_dir: Path, data: Path, task: common.Task, stride: int = 4) -> dict:
    """The first SFT checkpoint whose sampled training accuracy reaches ``task.start_accuracy``.

    Every ``stride``-th checkpoint is scored until one reaches it, then the ones just before
    it, in order; the other checkpoints are deleted afterwards (about 9 MB each).
    """
    def step_of(path: Path) -> int:
        return int(path.parent.name.rsplit("_", 1)[1])

    checkpoints = sorted(sft_dir.glob("global_step_*/actor"), key=step_of)
    rewards: dict[int, float] = {}

    def reward_of(index: int) -> float:
        if index not in rewards:
            rewards[index] = common.sampled_accuracy(checkpoints[index], data, task)
            print(f"SFT step {step_of(checkpoints[index])}: sampled accuracy {rewards[index]:.3f}", flush=True)
        return rewards[index]

    coarse = list(range(stride - 1, len(checkpoints), stride))
    first = next((i for i in coarse if reward_of(i) >= task.start_accuracy), None)
    if first is None:
        raise SystemExit(f"no SFT checkpoint in {sft_dir} reaches a sampled accuracy of {task.start_accuracy}; "
                         f"train the SFT stage longer (benchmarks/time_to_target/{task.sft_config})")
    chosen = next(i for i in range(max(0, first - stride + 1), first + 1)
                  if i == first or reward_of(i) >= task.start_accuracy)
    checkpoint = checkpoints[chosen]
    start = {"checkpoint": str(checkpoint.relative_to(sft_dir.parents[1])), "sft_step": step_of(checkpoint),
             "sampled_accuracy": rewards[chosen],
             "heldout_accuracy": common.heldout_accuracy(checkpoint, data, task)}
    for other in checkpoints:
        if other != checkpoint:
            shutil.rmtree(other.parent)
    return start


def run_one(system: str, seed: int, model: Path, data: Path, max_steps: int, raw_dir: Path, *,
            task: common.Task, lr: float, name: str | None = None) -> common.RunResult:
    script, *extra = SYSTEMS[system]
    args = [*extra, "--task", task.name, "--model", str(model), "--data", str(data), "--seed", str(seed),
            "--max-steps", str(max_steps), "--lr", str(lr)]
    name = name or f"{system}_seed{seed}"
    return common.run_in_process(HERE / script, args, out=raw_dir / f"{name}.json", log=raw_dir / f"{name}.log",
                                 label=f"{LABELS[system]} seed {seed} lr {lr:g}", cwd=ROOT)


# Which system's sweep sets each system's learning rate: trivium's systems share one learner.
SWEPT_BY = {"trl": "trl", "colocate": "colocate", "both": "colocate", "ray_both": "colocate"}


def sweep_learning_rates(systems: list[str], rates: list[float], seed: int, model: Path, data: Path,
                         max_steps: int, raw_dir: Path, task: common.Task) -> dict[str, dict[float, common.RunResult]]:
    """Each swept system's runs at every rate, on ``seed`` (kept apart from the measured seeds)."""
    swept = list(dict.fromkeys(SWEPT_BY[s] for s in systems))
    runs: dict[str, dict[float, common.RunResult]] = {s: {} for s in swept}
    for index, lr in enumerate(rates):
        shift = index % len(swept)
        for system in swept[shift:] + swept[:shift]:
            runs[system][lr] = run_one(system, seed, model, data, max_steps, raw_dir, task=task, lr=lr,
                                       name=f"sweep_{system}_lr{lr:g}")
    return runs


def best_rate(runs: dict[float, common.RunResult]) -> float:
    """The fastest to the target; if none reached it, the best mean reward over the last window."""
    reached = {lr: r.seconds_to_target for lr, r in runs.items() if r.seconds_to_target is not None}
    if reached:
        return min(reached, key=reached.get)
    return max(runs, key=lambda lr: statistics.fmean(s.reward for s in runs[lr].steps[-common.WINDOW:]) if runs[lr].steps else 0.0)


def median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    return "n/a" if value is None else pattern.format(value)


TASK_TEXT = {
    "arithmetic": "two-digit addition",
    "countdown": "countdown with three numbers (reward 1 for a correct equation, 0.1 for a well-formed wrong one)",
}


def report(results: dict[str, list[common.RunResult]], seeds: list[int], max_steps: int, start: dict, *,
           task: common.Task, rates: dict[str, float], sweep: dict[str, dict[float, common.RunResult]],
           sweep_seed: int | None) -> str:
    systems = list(results)
    base = "trl"
    by_seed = {s: {r.seed: r for r in results[s]} for s in systems}
    rate_text = ", ".join(f"{LABELS[s]} {rates[s]:g}" for s in systems)
    lines = [
        f"# Time to target on {task.name}: trivium vs TRL's GRPOTrainer",
        "",
        f"Tiny Llama model (0.78M parameters); every system starts from the same SFT checkpoint, the first of "
        f"the warm-up whose sampled accuracy on the training questions reaches {task.start_accuracy} (step "
        f"{start['sft_step']}: sampled accuracy {start['sampled_accuracy']:.3f}, held-out greedy accuracy "
        f"{start['heldout_accuracy']:.1%}). GRPO on {TASK_TEXT[task.name]}; group "
        f"{common.GROUP_SIZE}, {common.PROMPTS_PER_STEP} prompts per step (one optimizer step per "
        f"{common.GROUP_SIZE * common.PROMPTS_PER_STEP} samples), temperature {common.TEMPERATURE}, at most "
        f"{task.max_response_tokens} response tokens, clip {common.CLIP_EPSILON}, no KL, token-mean loss, AdamW "
        f"(weight decay {common.WEIGHT_DECAY}), grad clip {common.GRAD_CLIP}. Learning rates: {rate_text}"
        + (f" (each system's best of the sweep below, on seed {sweep_seed})" if sweep else "")
        + f". Target: the mean training reward over {common.WINDOW} consecutive steps reaches "
        f"{task.target_reward}; a run stops there, or after {max_steps} steps. Time counts from the start of "
        "the process (imports and model loading included). Held-out accuracy: greedy decoding of the 200 test "
        "questions with plain `model.generate`, the same code for every system. Seeds "
        f"{', '.join(map(str, seeds))}, run interleaved; the tables give medians, and the ratios the median "
        "(lowest-highest) of the per-seed ratios. TRL runs with two of its defaults turned off, because they "
        "handicap it on this task: gradient checkpointing (recomputing the activations of a 0.78M-parameter "
        "model only costs time) and bfloat16 autocast (emulated on this CPU).",
        "",
        f"Machine: {describe(**package_versions())}.",
        "",
        "| system | time to target (s) | speed-up vs TRL | speed-up vs colocate | steps to target | step time (s) | first step done (s) "
        "| held-out accuracy | peak RSS (MB) | reached |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system in systems:
        runs = results[system]
        lines.append(
            f"| {LABELS[system]} | {fmt(median([r.seconds_to_target for r in runs]))} | "
            f"{ratio_text(paired_ratios(by_seed, seeds, base, system))} | "
            f"{ratio_text(paired_ratios(by_seed, seeds, 'colocate', system))} | "
            f"{fmt(median([r.step_reached for r in runs]), '{:.0f}')} | "
            f"{fmt(median([r.median_step_seconds() for r in runs]), '{:.3f}')} | "
            f"{fmt(median([r.first_step_seconds() for r in runs]))} | "
            f"{fmt(median([r.heldout_accuracy for r in runs]), '{:.1%}')} | "
            f"{fmt(median([r.peak_rss_mb for r in runs]), '{:.0f}')} | "
            f"{sum(r.seconds_to_target is not None for r in runs)}/{len(runs)} |"
        )
    lines += startup_cost(by_seed, seeds)
    if sweep:
        lines += ["", f"Learning-rate sweep (seed {sweep_seed}; the chosen rate is the fastest to the target, or the "
                  "best final reward when none reached it):", "",
                  "| system | learning rate | time to target (s) | steps | final reward (last 5 steps) | chosen |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"]
        for system, runs in sweep.items():
            for lr, r in runs.items():
                final = statistics.fmean(st.reward for st in r.steps[-common.WINDOW:]) if r.steps else None
                lines.append(f"| {LABELS[system]} | {lr:g} | {fmt(r.seconds_to_target)} | {len(r.steps)} | "
                             f"{fmt(final, '{:.3f}')} | {'yes' if rates[system] == lr else ''} |")
    lines += ["", "Each run:", "", "| system | seed | time to target (s) | step | step time (s) | held-out accuracy | peak RSS (MB) |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for seed in seeds:
        for system in systems:
            r = by_seed[system].get(seed)
            if r is not None:
                lines.append(
                    f"| {LABELS[system]} | {seed} | {fmt(r.seconds_to_target)} | {r.step_reached or '-'} | "
                    f"{fmt(r.median_step_seconds(), '{:.3f}')} | {fmt(r.heldout_accuracy, '{:.1%}')} | "
                    f"{r.peak_rss_mb:.0f} |"
                )
    return "\n".join(lines) + "\n"


def ratio_text(ratios: list[float]) -> str:
    if not ratios:
        return "n/a"
    spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    return f"{statistics.median(ratios):.2f}x{spread}"


def paired_ratios(by_seed: dict[str, dict[int, common.RunResult]], seeds: list[int], base: str,
                  system: str) -> list[float]:
    """Per seed: ``base``'s time to target / ``system``'s (seeds where both reached it)."""
    if system == base or base not in by_seed or system not in by_seed:
        return []
    return [by_seed[base][s].seconds_to_target / by_seed[system][s].seconds_to_target
            for s in seeds if s in by_seed[base] and s in by_seed[system]
            and by_seed[base][s].seconds_to_target and by_seed[system][s].seconds_to_target]


def startup_cost(by_seed: dict[str, dict[int, common.RunResult]], seeds: list[int]) -> list[str]:
    """What placing the run on Ray costs before the first step, paired by seed with in-process ``both``."""
    if "ray_both" not in by_seed or "both" not in by_seed:
        return []
    extra = [by_seed["ray_both"][s].first_step_seconds() - by_seed["both"][s].first_step_seconds()
             for s in seeds if s in by_seed["ray_both"] and s in by_seed["both"]
             and by_seed["ray_both"][s].steps and by_seed["both"][s].steps]
    if not extra:
        return []
    return ["", f"Ray start-up cost: the first step of `both` on Ray ends {median(extra):.1f} s later than in-process "
            f"`both` (median of the paired differences, {min(extra):.1f}-{max(extra):.1f} s). It covers starting a "
            "local Ray, its actors' processes (each imports torch and loads the model) and the first cross-process "
            "weight sync."]


def package_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers", "trl")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=list(common.TASKS), default="arithmetic")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--lr-sweep", type=float, nargs="*", default=[1e-4, 3e-4, 1e-3],
                        help="learning rates to sweep first (none: every system runs at --lr)")
    parser.add_argument("--sweep-seed", type=int, default=100, help="the sweep's seed, apart from --seeds")
    parser.add_argument("--lr", type=float, default=common.LEARNING_RATE, help="the rate when there is no sweep")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / ".work")
    parser.add_argument("--output", type=Path, help="default: benchmarks/results/time_to_target[_TASK].md")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the report from the runs saved under --work-dir, without running anything")
    args = parser.parse_args()
    task = common.TASKS[args.task]
    output = args.output or RESULTS / ("time_to_target.md" if task.name == "arithmetic" else f"time_to_target_{task.name}.md")
    try:
        import trl  # noqa: F401
    except ImportError:
        if "trl" in args.systems:
            print("TRL is not installed: pip install 'trivium[bench]' (or pass --systems colocate both)")
            return 1

    model, start = prepare_assets(args.work_dir, task)
    print(f"every system starts from SFT step {start['sft_step']} (sampled accuracy {start['sampled_accuracy']:.3f}, "
          f"held-out greedy accuracy {start['heldout_accuracy']:.1%})", flush=True)
    data = args.work_dir / task.work_subdir / "data"
    raw_dir = args.work_dir / task.work_subdir / "time_to_target_runs"
    raw_dir.mkdir(parents=True, exist_ok=True)
    sweep = {}
    rates = {system: args.lr for system in args.systems}
    if args.report_only:
        swept = dict.fromkeys(SWEPT_BY[s] for s in args.systems) if args.lr_sweep else {}
        sweep = {s: {lr: common.RunResult.load(raw_dir / f"sweep_{s}_lr{lr:g}.json") for lr in args.lr_sweep}
                 for s in swept}
        rates = {system: best_rate(sweep[SWEPT_BY[system]]) for system in args.systems} if sweep else rates
        results = {s: [common.RunResult.load(raw_dir / f"{s}_seed{seed}.json") for seed in args.seeds]
                   for s in args.systems}
    else:
        if args.lr_sweep:
            sweep = sweep_learning_rates(args.systems, args.lr_sweep, args.sweep_seed, model, data, args.max_steps,
                                         raw_dir, task)
            rates = {system: best_rate(sweep[SWEPT_BY[system]]) for system in args.systems}
            print("learning rates: " + ", ".join(f"{s} {lr:g}" for s, lr in rates.items()), flush=True)
        results = {s: [] for s in args.systems}
        for index, seed in enumerate(args.seeds):
            shift = index % len(args.systems)
            for system in args.systems[shift:] + args.systems[:shift]:
                results[system].append(run_one(system, seed, model, data, args.max_steps, raw_dir, task=task,
                                               lr=rates[system]))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report(results, args.seeds, args.max_steps, start, task=task, rates=rates, sweep=sweep,
                             sweep_seed=args.sweep_seed))
    raw = {s: [json.loads((raw_dir / f"{s}_seed{r.seed}.json").read_text()) for r in runs] for s, runs in results.items()}
    output.with_suffix(".json").write_text(json.dumps({"learning_rates": rates, "runs": raw}))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
