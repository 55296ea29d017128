"""Time to a target training reward: trivium (colocate, both) against TRL's GRPOTrainer.

Every system starts from the same SFT checkpoint of the tiny model and runs GRPO on two-digit
addition with the settings in ``common.py`` (group 8, 16 prompts per step, same learning rate
and temperature, no KL). Each run is its own process; the systems take turns within each
seed, and the order rotates between seeds, so slow spells on the shared cores hit them alike.

    python benchmarks/time_to_target/run.py [--seeds 0 1 2] [--max-steps 400] [--systems trl colocate both]

Writes benchmarks/results/time_to_target.md (and the raw runs as JSON next to it).
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
    # Ray start-up (about 10-15 s on 2 cores) is part of its time, as a user waits for it.
    "ray_both": ["trivium_run.py", "--mode", "both", "--placement", "ray", "--engines", "2"],
}
LABELS = {
    "trl": "TRL GRPOTrainer", "colocate": "trivium colocate", "both": "trivium both",
    "ray_both": "trivium both on Ray (2 engine actors)",
}


def trivium_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "trivium.cli.main", *args], check=True, cwd=ROOT)


def prepare_assets(work: Path) -> tuple[Path, dict]:
    """The tiny model, the data and the starting checkpoint; built once, reused after.

    Returns the checkpoint every system starts from and how it was chosen.
    """
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "model" / "config.json").exists():
        trivium_cli("init", "model", "--preset", "tiny", "--out", str(work / "model"))
    if not (work / "data" / "train.jsonl").exists():
        trivium_cli("init", "data", "--task", "arithmetic", "--out", str(work / "data"),
                    "--num-train", "2000", "--num-test", "200")
    chosen = work / "time_to_target" / "start.json"
    if chosen.exists():
        start = json.loads(chosen.read_text())
        return work / start["checkpoint"], start
    sft_dir = work / "time_to_target" / "sft"
    if not any(sft_dir.glob("global_step_*/actor")):
        print("building the SFT checkpoints (once)", flush=True)
        env = dict(os.environ, TTT_WORK_DIR=str(work))
        subprocess.run([sys.executable, "-m", "trivium.cli.main", "run", "--config", str(HERE / "sft.yaml")],
                       check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    start = choose_start_checkpoint(sft_dir, work / "data")
    chosen.write_text(json.dumps(start))
    return work / start["checkpoint"], start


def choose_start_checkpoint(sft_dir: Path, data: Path, stride: int = 4) -> dict:
    """The first SFT checkpoint whose sampled training reward reaches ``common.START_REWARD``.

    Every ``stride``-th checkpoint is scored until one reaches it, then the ones just before
    it, in order; the other checkpoints are deleted afterwards (about 9 MB each).
    """
    def step_of(path: Path) -> int:
        return int(path.parent.name.rsplit("_", 1)[1])

    checkpoints = sorted(sft_dir.glob("global_step_*/actor"), key=step_of)
    rewards: dict[int, float] = {}

    def reward_of(index: int) -> float:
        if index not in rewards:
            rewards[index] = common.sampled_reward(checkpoints[index], data)
            print(f"SFT step {step_of(checkpoints[index])}: sampled reward {rewards[index]:.3f}", flush=True)
        return rewards[index]

    coarse = list(range(stride - 1, len(checkpoints), stride))
    first = next((i for i in coarse if reward_of(i) >= common.START_REWARD), None)
    if first is None:
        raise SystemExit(f"no SFT checkpoint in {sft_dir} reaches a sampled reward of {common.START_REWARD}; "
                         "train the SFT stage longer (benchmarks/time_to_target/sft.yaml)")
    chosen = next(i for i in range(max(0, first - stride + 1), first + 1)
                  if i == first or reward_of(i) >= common.START_REWARD)
    checkpoint = checkpoints[chosen]
    start = {"checkpoint": str(checkpoint.relative_to(sft_dir.parents[1])), "sft_step": step_of(checkpoint),
             "sampled_reward": rewards[chosen],
             "heldout_accuracy": common.heldout_accuracy(checkpoint, data)}
    for other in checkpoints:
        if other != checkpoint:
            shutil.rmtree(other.parent)
    return start


def run_one(system: str, seed: int, model: Path, data: Path, max_steps: int, raw_dir: Path) -> common.RunResult:
    script, *extra = SYSTEMS[system]
    args = [*extra, "--model", str(model), "--data", str(data), "--seed", str(seed), "--max-steps", str(max_steps)]
    return common.run_in_process(HERE / script, args, out=raw_dir / f"{system}_seed{seed}.json",
                                 log=raw_dir / f"{system}_seed{seed}.log", label=f"{LABELS[system]} seed {seed}",
                                 cwd=ROOT)


def median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    return "n/a" if value is None else pattern.format(value)


def report(results: dict[str, list[common.RunResult]], seeds: list[int], max_steps: int, start: dict) -> str:
    systems = list(results)
    base = "trl"
    by_seed = {s: {r.seed: r for r in results[s]} for s in systems}
    lines = [
        "# Time to target: trivium vs TRL's GRPOTrainer",
        "",
        f"Tiny Llama model (0.78M parameters); every system starts from the same SFT checkpoint, the first of "
        f"the warm-up whose sampled reward on the training questions reaches {common.START_REWARD} (step "
        f"{start['sft_step']}: sampled reward {start['sampled_reward']:.3f}, held-out greedy accuracy "
        f"{start['heldout_accuracy']:.1%}). GRPO on two-digit addition; group "
        f"{common.GROUP_SIZE}, {common.PROMPTS_PER_STEP} prompts per step (one optimizer step per "
        f"{common.GROUP_SIZE * common.PROMPTS_PER_STEP} samples), learning rate {common.LEARNING_RATE:g}, "
        f"temperature {common.TEMPERATURE}, at most {common.MAX_RESPONSE_TOKENS} response tokens, clip "
        f"{common.CLIP_EPSILON}, no KL, token-mean loss, AdamW (weight decay {common.WEIGHT_DECAY}), grad clip "
        f"{common.GRAD_CLIP}. Target: the mean training reward over {common.WINDOW} consecutive steps reaches "
        f"{common.TARGET_REWARD}; a run stops there, or after {max_steps} steps. Time counts from the start of "
        "the process (imports and model loading included). Held-out accuracy: greedy decoding of the 200 test "
        "questions with plain `model.generate`, the same code for every system. Seeds "
        f"{', '.join(map(str, seeds))}, run interleaved; the tables give medians. TRL runs with two of its "
        "defaults turned off, because they handicap it on this task: gradient checkpointing (recomputing the "
        "activations of a 0.78M-parameter model only costs time) and bfloat16 autocast (emulated on this CPU).",
        "",
        f"Machine: {describe(**package_versions())}.",
        "",
        "| system | time to target (s) | vs TRL | vs colocate | steps to target | step time (s) | first step done (s) "
        "| held-out accuracy | peak RSS (MB) | reached |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system in systems:
        runs = results[system]
        lines.append(
            f"| {LABELS[system]} | {fmt(median([r.seconds_to_target for r in runs]))} | "
            f"{fmt(paired_speedup(by_seed, seeds, base, system), '{:.2f}x faster')} | "
            f"{fmt(paired_speedup(by_seed, seeds, 'colocate', system), '{:.2f}x')} | "
            f"{fmt(median([r.step_reached for r in runs]), '{:.0f}')} | "
            f"{fmt(median([r.median_step_seconds() for r in runs]), '{:.3f}')} | "
            f"{fmt(median([r.first_step_seconds() for r in runs]))} | "
            f"{fmt(median([r.heldout_accuracy for r in runs]), '{:.1%}')} | "
            f"{fmt(median([r.peak_rss_mb for r in runs]), '{:.0f}')} | "
            f"{sum(r.seconds_to_target is not None for r in runs)}/{len(runs)} |"
        )
    lines += startup_cost(by_seed, seeds)
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


def paired_speedup(by_seed: dict[str, dict[int, common.RunResult]], seeds: list[int], base: str,
                   system: str) -> float | None:
    """The median over seeds of the paired ratio: ``base``'s time to target / ``system``'s."""
    if system == base or base not in by_seed or system not in by_seed:
        return None
    pairs = [by_seed[base][s].seconds_to_target / by_seed[system][s].seconds_to_target
             for s in seeds if s in by_seed[base] and s in by_seed[system]
             and by_seed[base][s].seconds_to_target and by_seed[system][s].seconds_to_target]
    return median(pairs)


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
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / ".work")
    parser.add_argument("--output", type=Path, default=RESULTS / "time_to_target.md")
    args = parser.parse_args()
    try:
        import trl  # noqa: F401
    except ImportError:
        if "trl" in args.systems:
            print("TRL is not installed: pip install 'trivium[bench]' (or pass --systems colocate both)")
            return 1

    model, start = prepare_assets(args.work_dir)
    print(f"every system starts from SFT step {start['sft_step']} (sampled reward {start['sampled_reward']:.3f}, "
          f"held-out greedy accuracy {start['heldout_accuracy']:.1%})", flush=True)
    data = args.work_dir / "data"
    raw_dir = args.work_dir / "time_to_target_runs"
    raw_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[common.RunResult]] = {s: [] for s in args.systems}
    for index, seed in enumerate(args.seeds):
        shift = index % len(args.systems)
        for system in args.systems[shift:] + args.systems[:shift]:
            results[system].append(run_one(system, seed, model, data, args.max_steps, raw_dir))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report(results, args.seeds, args.max_steps, start))
    raw = {s: [json.loads((raw_dir / f"{s}_seed{r.seed}.json").read_text()) for r in runs] for s, runs in results.items()}
    args.output.with_suffix(".json").write_text(json.dumps(raw))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
