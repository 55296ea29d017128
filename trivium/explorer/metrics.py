"""Per-step rollout and evaluation metrics, from the runner results of one step."""

from __future__ import annotations

import statistics

from trivium.core.experience import Experience
from trivium.explorer.runner import UnitResult


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}_mean": statistics.fmean(values),
        f"{prefix}_std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        f"{prefix}_min": min(values),
        f"{prefix}_max": max(values),
    }


def passed(exp: Experience) -> bool:
    """A sample passes when its accuracy component says so, else when its reward is positive."""
    if "accuracy" in exp.metrics:
        return exp.metrics["accuracy"] >= 1.0
    return (exp.reward or 0.0) > 0.0


def rollout_metrics(results: list[UnitResult], experiences: list[Experience], seconds: float) -> dict[str, float]:
    produced = [exp for result in results for exp in result.experiences]
    metrics = {
        **_stats("rollout/reward", [float(e.reward) for e in produced]),
        **_stats("rollout/response_length", [float(e.response_length) for e in produced]),
        "rollout/num_experiences": float(len(experiences)),
        "rollout/failed_tasks": float(sum(not r.ok for r in results)),
        "rollout/retries": float(sum(max(0, r.attempts - 1) for r in results)),
        "rollout/timeouts": float(sum(r.timeouts for r in results)),
        "rollout/dropped_experiences": float(sum(len(r.dropped) for r in results)),
        "rollout/prompt_truncated": float(sum(e.prompt_truncated for e in produced)),
        "rollout/episode_truncated": float(sum(e.episode_truncated for e in produced)),
        "time/explore_step": seconds,
    }
    if produced:
        metrics["rollout/pass_rate"] = sum(passed(e) for e in produced) / len(produced)
        tokens = sum(e.response_length for e in produced)
        metrics["time/throughput_rollout_tokens_per_s"] = tokens / seconds if seconds > 0 else 0.0
        components = {key for e in produced for key in e.metrics}
        for key in sorted(components):
            values = [e.metrics[key] for e in produced if key in e.metrics]
            metrics[f"rollout/{key}"] = statistics.fmean(values)
    return metrics


def eval_metrics(name: str, results: list[UnitResult], seconds: float) -> dict[str, float]:
    produced = [exp for result in results for exp in result.experiences]
    prefix = f"eval/{name}"
    metrics = {f"{prefix}/failed_tasks": float(sum(not r.ok for r in results)), f"{prefix}/seconds": seconds}
    if produced:
        metrics[f"{prefix}/accuracy"] = sum(passed(e) for e in produced) / len(produced)
        metrics[f"{prefix}/reward_mean"] = statistics.fmean(float(e.reward) for e in produced)
        metrics[f"{prefix}/response_length_mean"] = statistics.fmean(e.response_length for e in produced)
        metrics[f"{prefix}/num_samples"] = float(len(produced))
    return metrics
