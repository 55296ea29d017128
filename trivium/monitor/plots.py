"""PNG plots of a run over steps, into ``<run_dir>/plots/``.

``PLOTS`` is the whole policy: each plot names the metric keys (or ``fnmatch`` patterns)
it draws and which role logs them. A plot whose keys never appear in ``metrics.jsonl`` is
simply not drawn. Figures are built with matplotlib's object API on the Agg canvas, never
through ``pyplot``, so plotting works headless and from any thread.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trivium.core import metric_names as names
from trivium.monitor.metrics_file import metric_keys, read_metrics, series

PLOTS_DIR_NAME = "plots"
MARKERS_UP_TO_POINTS = 40  # beyond this, markers only clutter the line


@dataclass(frozen=True)
class PlotSpec:
    name: str  # file name without .png
    title: str
    y_label: str
    patterns: tuple[str, ...]
    roles: tuple[str, ...] | None = None  # None: whichever role logs the key
    axis_per_key: bool = False  # keys with different units get their own panel


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("reward", "Reward", "mean reward", (names.REWARD_MEAN,), (names.EXPLORER,)),
    PlotSpec("eval_accuracy", "Eval accuracy", "accuracy", (names.EVAL_ACCURACY,), (names.EXPLORER,)),
    PlotSpec(
        "loss",
        "Loss",
        "loss",
        (names.POLICY_LOSS, "actor/sft_loss", "actor/dpo_loss", "critic/vf_loss"),
        (names.TRAINER,),
    ),
    PlotSpec("kl", "KL divergence", "KL", (names.KL_LOSS, "actor/ppo_kl"), (names.TRAINER,)),
    PlotSpec("entropy", "Entropy", "entropy (nats)", (names.ENTROPY,), (names.TRAINER,)),
    PlotSpec("response_length", "Response length", "tokens", (names.RESPONSE_LENGTH_MEAN,)),
    PlotSpec("staleness", "Staleness", "model versions behind", (names.STALENESS_MEAN, names.STALENESS_MAX)),
    PlotSpec("throughput", "Throughput", "per second", (names.THROUGHPUT,), axis_per_key=True),
)


@dataclass
class Line:
    label: str
    steps: list[int]
    values: list[float]


def plot_lines(spec: PlotSpec, records: list[dict[str, Any]]) -> list[Line]:
    """The (role, key) series a plot draws, in pattern order, each labelled by its key."""
    roles = spec.roles or names.ROLES
    pairs: list[tuple[str, str]] = []
    for pattern in spec.patterns:
        for role in roles:
            for key in metric_keys(records, role=role):
                if fnmatch.fnmatchcase(key, pattern) and (role, key) not in pairs:
                    pairs.append((role, key))
    several_roles = len({role for role, _ in pairs}) > 1
    lines = []
    for role, key in pairs:
        steps, values = series(records, key, role=role)
        if values:
            lines.append(Line(f"{key} ({role})" if several_roles else key, steps, values))
    return lines


def build_figure(spec: PlotSpec, records: list[dict[str, Any]]):
    """A matplotlib ``Figure`` for ``spec``, or ``None`` when none of its keys were logged."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    lines = plot_lines(spec, records)
    if not lines:
        return None
    panels = len(lines) if spec.axis_per_key else 1
    figure = Figure(figsize=(7.5, 3.2 * panels if panels > 1 else 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    for index, line in enumerate(lines):
        axis = axes[index if spec.axis_per_key else 0]
        marker = "o" if len(line.values) <= MARKERS_UP_TO_POINTS else None
        axis.plot(line.steps, line.values, marker=marker, markersize=3, linewidth=1.5, label=line.label)
    for axis in axes:
        axis.set_ylabel(spec.y_label)
        axis.grid(True, alpha=0.3)
        axis.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    figure.suptitle(spec.title)
    return figure


def build_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    figures = {}
    for spec in PLOTS:
        figure = build_figure(spec, records)
        if figure is not None:
            figures[spec.name] = figure
    return figures


def plots_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / PLOTS_DIR_NAME


def write_plots(run_dir: str | Path, records: list[dict[str, Any]] | None = None) -> list[Path]:
    """Draw every plot whose metrics exist; returns the PNG paths in ``PLOTS`` order."""
    records = read_metrics(run_dir) if records is None else records
    directory = plots_dir(run_dir)
    written = []
    for name, figure in build_figures(records).items():
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.png"
        figure.savefig(path, format="png")
        written.append(path)
    return written
