"""What a run did, in a dozen lines: computed from ``metrics.jsonl`` and the run directory.

Steps done, best and last eval accuracy per taskset, the reward trend (mean of the first N
explore steps against the last N), throughput, staleness, idle time of explorer and trainer,
the start-up time (process start to first step),
what a run that fell short did not train and why (``trivium.monitor.shortfall``),
and where the checkpoints are.
Used at the end of ``trivium run``, by ``trivium report``, and in ``report.html``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trivium.core import metric_names as names
from trivium.monitor.metrics_file import metric_keys, read_metrics, series
from trivium.monitor.shortfall import Shortfall

DEFAULT_TREND_WINDOW = 5


@dataclass
class EvalResult:
    taskset: str
    best: float
    best_step: int
    last: float
    last_step: int


@dataclass
class RewardTrend:
    window: int  # how many steps each mean covers
    first_mean: float
    last_mean: float

    @property
    def change(self) -> float:
        return self.last_mean - self.first_mean


@dataclass
class IdleTime:
    """Seconds one side waited on the other, over the steps that logged it."""

    total: float
    steps: int

    @property
    def per_step(self) -> float:
        return self.total / self.steps if self.steps else 0.0


@dataclass
class RunSummary:
    run_dir: Path
    steps_done: dict[str, int] = field(default_factory=dict)  # role -> last step logged
    wall_seconds: float | None = None
    evals: list[EvalResult] = field(default_factory=list)
    reward_trend: RewardTrend | None = None
    throughput: dict[str, dict[str, float]] = field(default_factory=dict)  # role -> {unit: mean}
    staleness_mean: float | None = None
    staleness_max: float | None = None
    off_policy: dict[str, float] = field(default_factory=dict)  # "capped"/"masked" -> mean share of tokens
    # Sampling-mask replay: the mean size of the kept sets, and the mean share of tokens over the cap
    replayed_masks: tuple[float, float] | None = None
    idle: dict[str, IdleTime] = field(default_factory=dict)  # role -> its waits on the other side
    startup_seconds: float | None = None  # the latest process's start to its first step
    checkpoint_steps: list[int] = field(default_factory=list)
    shortfall: Shortfall | None = None  # what the run's end found not trained (none since)

    @property
    def latest_checkpoint_dir(self) -> Path | None:
        return self.run_dir / f"global_step_{self.checkpoint_steps[-1]}" if self.checkpoint_steps else None


def compute_summary(
    run_dir: str | Path,
    records: list[dict[str, Any]] | None = None,
    *,
    trend_window: int = DEFAULT_TREND_WINDOW,
) -> RunSummary:
    run_dir = Path(run_dir)
    records = read_metrics(run_dir) if records is None else records
    summary = RunSummary(run_dir=run_dir, checkpoint_steps=_checkpoint_steps(run_dir))
    for role in names.ROLES:
        steps = [int(record["step"]) for record in records if record.get("role") == role]
        if steps:
            summary.steps_done[role] = max(steps)
    times = [record["time"] for record in records if isinstance(record.get("time"), (int, float))]
    if times:
        summary.wall_seconds = max(times) - min(times)
    summary.evals = eval_results(records)
    summary.reward_trend = reward_trend(records, trend_window)
    for role in names.ROLES:
        rates = {}
        for unit, key in (
            ("tokens/s", names.TOKENS_PER_SECOND),
            ("experiences/s", names.EXPERIENCES_PER_SECOND),
        ):
            _, values = series(records, key, role=role)
            if values:
                recent = values[-trend_window:]
                rates[unit] = sum(recent) / len(recent)
        if rates:
            summary.throughput[role] = rates
    _, staleness = series(records, names.STALENESS_MEAN)
    _, staleness_peaks = series(records, names.STALENESS_MAX)
    if staleness:
        summary.staleness_mean = sum(staleness) / len(staleness)
    if staleness_peaks or staleness:
        summary.staleness_max = max(staleness_peaks or staleness)
    for label, key in (("capped", names.OFF_POLICY_CAPPED), ("masked", names.OFF_POLICY_MASKED)):
        _, shares = series(records, key)
        if shares:
            summary.off_policy[label] = sum(shares) / len(shares)
    _, kept_sizes = series(records, names.SAMPLING_MASK_KEPT)
    if kept_sizes:
        _, over_cap = series(records, names.SAMPLING_MASK_CAPPED)
        summary.replayed_masks = (
            sum(kept_sizes) / len(kept_sizes),
            sum(over_cap) / len(over_cap) if over_cap else 0.0,
        )
    for role, key in ((names.EXPLORER, names.IDLE_EXPLORER), (names.TRAINER, names.IDLE_TRAINER)):
        _, waits = series(records, key, role=role)
        if waits:
            summary.idle[role] = IdleTime(total=sum(waits), steps=len(waits))
    _, startups = series(records, names.STARTUP)
    if startups:
        summary.startup_seconds = startups[-1]
    trainer_records = [record for record in records if record.get("role") == names.TRAINER]
    if trainer_records:
        # Logged last by a run that fell short; a later run that trained on logs after it.
        summary.shortfall = Shortfall.from_metrics(trainer_records[-1])
    return summary


def eval_results(records: list[dict[str, Any]]) -> list[EvalResult]:
    results = []
    for key in metric_keys(records):
        taskset = names.eval_taskset_of(key)
        if taskset is None or not fnmatch.fnmatchcase(key, names.EVAL_ACCURACY):
            continue
        steps, values = series(records, key)
        if not values:
            continue
        best_index = max(range(len(values)), key=lambda index: values[index])  # first of equal bests
        results.append(EvalResult(taskset, values[best_index], steps[best_index], values[-1], steps[-1]))
    return results


def reward_trend(records: list[dict[str, Any]], window: int) -> RewardTrend | None:
    """Mean reward of the first ``window`` explore steps against the last ``window``.

    With fewer than ``2 * window`` steps the windows shrink so they never overlap.
    """
    _, rewards = series(records, names.REWARD_MEAN, role=names.EXPLORER)
    if not rewards:
        _, rewards = series(records, names.REWARD_MEAN)
    window = min(window, len(rewards) // 2)
    if window == 0:
        return None
    first, last = rewards[:window], rewards[-window:]
    return RewardTrend(window=window, first_mean=sum(first) / window, last_mean=sum(last) / window)


def _checkpoint_steps(run_dir: Path) -> list[int]:
    # The trainer owns what counts as a complete checkpoint.
    from trivium.trainer.checkpoint import list_checkpoints

    return list_checkpoints(run_dir)


# ---- text ---------------------------------------------------------------------------------


def summary_lines(summary: RunSummary) -> list[str]:
    lines = [f"run directory: {summary.run_dir}"]
    shortfall = summary.shortfall
    if summary.steps_done:
        planned = {names.TRAINER: f" of {shortfall.planned_steps}"} if shortfall else {}
        done = ", ".join(f"{role} {step}{planned.get(role, '')}" for role, step in summary.steps_done.items())
        duration = f" in {_duration(summary.wall_seconds)}" if summary.wall_seconds else ""
        lines.append(f"steps done: {done}{duration}")
    else:
        lines.append("steps done: none logged yet (metrics.jsonl is missing or empty)")
    if shortfall is not None and shortfall.falls_short:
        first, why = shortfall.lines()
        lines.append(f"fell short: {first}")
        lines.append(f"  {why}")
    for result in summary.evals:
        lines.append(
            f"eval {result.taskset}: best {result.best:.4f} (step {result.best_step}), "
            f"last {result.last:.4f} (step {result.last_step})"
        )
    trend = summary.reward_trend
    if trend is not None:
        lines.append(
            f"reward: {_number(trend.first_mean)} (first {trend.window} steps) -> {_number(trend.last_mean)} "
            f"(last {trend.window}), change {_number(trend.change, sign=True)}"
        )
    for role, rates in summary.throughput.items():
        text = ", ".join(f"{value:,.1f} {unit}" for unit, value in rates.items())
        lines.append(f"throughput ({role}, recent): {text}")
    if summary.staleness_mean is not None:
        lines.append(f"staleness: mean {summary.staleness_mean:.2f}, max {summary.staleness_max:g} steps")
    if summary.off_policy:
        shares = ", ".join(f"{share:.1%} {label}" for label, share in summary.off_policy.items())
        lines.append(f"off-policy correction (pi_proximal / pi_engine): {shares} of tokens per step")
    if summary.replayed_masks is not None:
        kept, over_cap = summary.replayed_masks
        lines.append(
            f"sampling masks replayed: {kept:.1f} tokens kept per sampled token (mean), "
            f"{over_cap:.1%} of tokens over the cap"
        )
    if summary.idle:
        text = ", ".join(
            f"{role} {idle.total:.1f}s ({idle.per_step:.3f}s per step)" for role, idle in summary.idle.items()
        )
        lines.append(f"idle (waiting on the other side): {text}")
    if summary.startup_seconds is not None:
        lines.append(f"start-up: {summary.startup_seconds:.1f}s from the process's start to its first step")
    if summary.checkpoint_steps:
        steps = summary.checkpoint_steps
        shown = ", ".join(str(step) for step in steps[-5:])
        more = f" (+{len(steps) - 5} older)" if len(steps) > 5 else ""
        lines.append(f"checkpoints: steps {shown}{more}; latest: {summary.latest_checkpoint_dir}")
        hf_export = summary.latest_checkpoint_dir / "actor" / "huggingface"
        if hf_export.is_dir():
            lines.append(f"Hugging Face export: {hf_export}")
    else:
        lines.append("checkpoints: none yet")
    return lines


def render_summary(run_dir: str | Path, *, trend_window: int = DEFAULT_TREND_WINDOW) -> str:
    return "\n".join(summary_lines(compute_summary(run_dir, trend_window=trend_window)))


def print_summary(
    run_dir: str | Path, console: Any = None, *, trend_window: int = DEFAULT_TREND_WINDOW
) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    console = console or Console(highlight=False)
    text = Text("\n".join(summary_lines(compute_summary(run_dir, trend_window=trend_window))))
    console.print(Panel(text, title="run summary", expand=False))


def _number(value: float, *, sign: bool = False) -> str:
    """Four decimals, or four significant digits for a huge value (never hundreds of digits)."""
    plus = "+" if sign else ""
    return f"{value:{plus}.4f}" if abs(value) < 1e6 else f"{value:{plus}.4g}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
