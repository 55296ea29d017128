"""Does asynchrony pay? Time to the quickstart target for colocate, both and both + fully_async.

The same runs as the time-to-target benchmark (``time_to_target/trivium_run.py``: GRPO on
two-digit addition from the shared SFT checkpoint, stop when the 5-step mean reward reaches the
target), one process per run, systems interleaved within each seed and their order rotated
between seeds. Besides the time, each run records how long explorer and trainer waited on each
other (``time/idle_explorer``, ``time/idle_trainer``).

Two scenarios: ``quickstart`` as it is (all CPU work), and ``verifier_latency``, where each
answer also waits for a slow outside verifier (0.1 s, one task in 8 1.5 s; see
``trivium_run.py --verifier-latency``); there fully_async also uses over-rollout. fully_async runs
twice: with the decoupled objective and with the engine's logprobs in the clipped ratio.

    python benchmarks/asynchrony.py [--seeds 0 1 2] [--latency-seeds 0 1] [--max-steps 400]

Writes benchmarks/results/asynchrony.md (and the raw runs as JSON next to it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TTT = HERE / "time_to_target"
sys.path.insert(0, str(TTT))
sys.path.insert(0, str(HERE))

import common  # noqa: E402
from machine import describe  # noqa: E402

RESULTS = HERE / "results"
# The explorer never waits at a sync point; it may run one batch ahead (sync_offset 1).
FULLY_ASYNC_SCHEDULE = ["--mode", "both", "--sync-style", "fully_async"]
# Stale tokens weighted by pi_proximal / pi_engine (decoupled PPO).
FULLY_ASYNC = [*FULLY_ASYNC_SCHEDULE, "--old-logprobs", "decoupled"]
# The engine's logprobs in the clipped ratio (off-policy PPO, as `both`).
FULLY_ASYNC_ENGINE = [*FULLY_ASYNC_SCHEDULE, "--old-logprobs", "engine"]
LATENCY = ["--verifier-latency"]
# A step goes on once 12 of its 16 tasks are verified (and 0.05 s more).
OVER_ROLLOUT = ["--over-rollout", "0.25"]
SCENARIOS = {
    "quickstart": {
        "colocate": ["--mode", "colocate"],
        "both": ["--mode", "both"],
        "fully_async": FULLY_ASYNC,
        "fully_async_engine": FULLY_ASYNC_ENGINE,
    },
    "verifier_latency": {
        "colocate": ["--mode", "colocate", *LATENCY],
        "both": ["--mode", "both", *LATENCY],
        "fully_async": [*FULLY_ASYNC, *OVER_ROLLOUT, *LATENCY],
        "fully_async_engine": [*FULLY_ASYNC_ENGINE, *OVER_ROLLOUT, *LATENCY],
    },
}
LABELS = {
    ("quickstart", "colocate"): "colocate",
    ("quickstart", "both"): "both (fixed, sync_offset 1)",
    ("quickstart", "fully_async"): "both + fully_async (sync_offset 1, decoupled PPO)",
    ("quickstart", "fully_async_engine"): "both + fully_async (sync_offset 1, engine logprobs)",
    ("verifier_latency", "colocate"): "colocate",
    ("verifier_latency", "both"): "both (fixed, sync_offset 1)",
    ("verifier_latency", "fully_async"): "both + fully_async + over-rollout 0.25 (decoupled PPO)",
    ("verifier_latency", "fully_async_engine"): "both + fully_async + over-rollout 0.25 (engine logprobs)",
}


def run_one(scenario: str, system: str, seed: int, model: Path, data: Path, max_steps: int,
            raw_dir: Path) -> common.RunResult:
    name = f"{scenario}_{system}_seed{seed}"
    args = [*SCENARIOS[scenario][system], "--model", str(model), "--data", str(data), "--seed", str(seed),
            "--max-steps", str(max_steps)]
    return common.run_in_process(TTT / "trivium_run.py", args, out=raw_dir / f"{name}.json",
                                 log=raw_dir / f"{name}.log", label=f"{scenario} {LABELS[scenario, system]} seed {seed}",
                                 cwd=ROOT)


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    return "n/a" if value is None else pattern.format(value)


def idle_per_step(result: common.RunResult, key: str) -> float | None:
    """Mean seconds per explorer step that one side waited on the other."""
    steps = len(result.steps)
    return result.idle_seconds.get(key, 0.0) / steps if steps and result.idle_seconds else None


def speedup_over_colocate(by_seed: dict[str, dict[int, common.RunResult]], system: str, seeds: list[int]) -> list[float]:
    """Per seed: colocate's time to target / this system's."""
    pairs = []
    for seed in seeds:
        base, run = by_seed["colocate"].get(seed), by_seed[system].get(seed)
        if base and run and base.seconds_to_target and run.seconds_to_target:
            pairs.append(base.seconds_to_target / run.seconds_to_target)
    return pairs


def report(results: dict[str, dict[str, list[common.RunResult]]], seeds: dict[str, list[int]], max_steps: int,
           load_before: str) -> str:
    lines = [
        "# Asynchrony: time to target, colocate vs both vs both + fully_async",
        "",
        "The time-to-target task (see [time_to_target.md](time_to_target.md)): GRPO on two-digit addition with the "
        f"tiny model from the shared SFT checkpoint; group {common.GROUP_SIZE}, {common.PROMPTS_PER_STEP} prompts "
        f"per step, learning rate {common.LEARNING_RATE:g}; target: mean training reward over {common.WINDOW} "
        f"steps >= {common.TASKS['arithmetic'].target_reward}, at most {max_steps} steps. Time counts from process start. Idle: "
        "seconds per explorer step that the explorer waited on the trainer (`time/idle_explorer`) and the "
        "trainer on the explorer (`time/idle_trainer`); in colocate each side idles while the other has its "
        "turn. Seeds interleaved with rotating order; medians; 'vs colocate' is the median of the per-seed "
        "ratios colocate time / this time (each ratio in brackets).",
        "",
        f"Machine: {describe(**package_versions())}; load average before the runs: {load_before}.",
    ]
    for scenario, by_system in results.items():
        lines += ["", f"## {SCENARIO_TITLES[scenario]} (seeds {', '.join(map(str, seeds[scenario]))})", ""]
        lines += scenario_tables(scenario, by_system, seeds[scenario])
    return "\n".join(lines) + "\n"


SCENARIO_TITLES = {
    "quickstart": "Quickstart task (all CPU work)",
    "verifier_latency": "With a slow verifier (0.1 s per answer, one task in 8 1.5 s)",
}


def scenario_tables(scenario: str, results: dict[str, list[common.RunResult]], seeds: list[int]) -> list[str]:
    by_seed = {s: {r.seed: r for r in runs} for s, runs in results.items()}
    lines = [
        "| system | time to target (s) | vs colocate | steps to target | step time (s) "
        "| explorer idle (s/step) | trainer idle (s/step) | held-out accuracy | reached |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system, runs in results.items():
        ratios = speedup_over_colocate(by_seed, system, seeds) if system != "colocate" and "colocate" in results else []
        ratio_text = (f"{median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})" if ratios else "-")
        lines.append(
            f"| {LABELS[scenario, system]} | {fmt(median(r.seconds_to_target for r in runs))} | {ratio_text} | "
            f"{fmt(median(r.step_reached for r in runs), '{:.0f}')} | "
            f"{fmt(median(r.median_step_seconds() for r in runs), '{:.3f}')} | "
            f"{fmt(median(idle_per_step(r, 'time/idle_explorer') for r in runs), '{:.3f}')} | "
            f"{fmt(median(idle_per_step(r, 'time/idle_trainer') for r in runs), '{:.3f}')} | "
            f"{fmt(median(r.heldout_accuracy for r in runs), '{:.1%}')} | "
            f"{sum(r.seconds_to_target is not None for r in runs)}/{len(runs)} |"
        )
    lines += ["", "| system | seed | time to target (s) | step | step time (s) | explorer idle (s/step) "
              "| trainer idle (s/step) | held-out accuracy |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for seed in seeds:
        for system in results:
            r = by_seed[system].get(seed)
            if r is not None:
                lines.append(
                    f"| {LABELS[scenario, system]} | {seed} | {fmt(r.seconds_to_target)} | {r.step_reached or '-'} | "
                    f"{fmt(r.median_step_seconds(), '{:.3f}')} | {fmt(idle_per_step(r, 'time/idle_explorer'), '{:.3f}')} | "
                    f"{fmt(idle_per_step(r, 'time/idle_trainer'), '{:.3f}')} | {fmt(r.heldout_accuracy, '{:.1%}')} |"
                )
    return lines


def package_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2],
                        help="seeds of the quickstart scenario (none: skip it)")
    parser.add_argument("--latency-seeds", type=int, nargs="*", default=[0, 1],
                        help="seeds of the verifier-latency scenario (none: skip it)")
    parser.add_argument("--systems", nargs="+", choices=list(SCENARIOS["quickstart"]),
                        default=list(SCENARIOS["quickstart"]))
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / ".work")
    parser.add_argument("--output", type=Path, default=RESULTS / "asynchrony.md")
    args = parser.parse_args()

    from run import prepare_assets  # time_to_target/run.py: the model, data and shared start checkpoint

    model, start = prepare_assets(args.work_dir)
    print(f"every system starts from SFT step {start['sft_step']}", flush=True)
    data = args.work_dir / "data"
    raw_dir = args.work_dir / "asynchrony_runs"
    raw_dir.mkdir(parents=True, exist_ok=True)
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "unknown"
    seeds = {"verifier_latency": args.latency_seeds, "quickstart": args.seeds}
    results: dict[str, dict[str, list[common.RunResult]]] = {}
    for scenario, scenario_seeds in seeds.items():
        if not scenario_seeds:
            continue
        results[scenario] = {s: [] for s in args.systems}
        for index, seed in enumerate(scenario_seeds):
            shift = index % len(args.systems)
            for system in args.systems[shift:] + args.systems[:shift]:
                results[scenario][system].append(run_one(scenario, system, seed, model, data, args.max_steps, raw_dir))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report(results, seeds, args.max_steps, load_before))
    raw = {f"{scenario}/{system}": [json.loads((raw_dir / f"{scenario}_{system}_seed{r.seed}.json").read_text())
                                    for r in runs]
           for scenario, by_system in results.items() for system, runs in by_system.items()}
    args.output.with_suffix(".json").write_text(json.dumps(raw))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
