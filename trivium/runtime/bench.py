"""``mode: bench``: evaluate models on the eval tasksets and print a table.

What is evaluated: the base model when the run directory holds no checkpoint, otherwise
every checkpoint in it (only the newest with ``explorer.bench_on_latest_checkpoint``), or
the external API model when ``model.external_model.enable`` is set. One session serves them
all: its engines load each checkpoint's weights in turn. Results go to
``<run dir>/bench/results.json`` and the metrics file.
"""

from __future__ import annotations

import json
from typing import Any

from trivium.runtime import loops
from trivium.runtime.session import RunSession
from trivium.trainer import checkpoint as ckpt


def bench_targets(session: RunSession) -> list[tuple[str, int | None]]:
    """(label, checkpoint step) of each model to evaluate; None is the model the engines start with."""
    rollout = session.settings.explorer.rollout
    if rollout.engine_type == "external":
        return [(f"external:{rollout.model_name}", None)]
    steps = ckpt.list_checkpoints(session.run_dir)
    if session.settings.explorer.bench_on_latest_checkpoint and steps:
        steps = steps[-1:]
    if not steps:
        return [("base", None)]
    return [(f"global_step_{step}", step) for step in steps]


def run_bench(config: Any, console: Any = None) -> int:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False)
    session = RunSession(config, console=console)
    results: list[dict[str, Any]] = []
    try:
        for label, step in bench_targets(session):
            if step is not None:
                session.explorer.load_checkpoint_weights(step)
            version = step or 0
            metrics = loops.evaluate(session, version)
            results.append({"model": label, "version": version, **metrics})
    finally:
        session.close()
    out = session.run_dir / "bench"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))

    table = Table(title="Benchmark")
    keys = sorted({k for r in results for k in r if k.endswith(("/accuracy", "/reward_mean"))})
    table.add_column("model")
    for key in keys:
        table.add_column(key.removeprefix("eval/"))
    for row in results:
        table.add_row(row["model"], *[f"{row[k]:.3f}" if k in row else "-" for k in keys])
    console.print(table)
    console.print(f"results written to {out / 'results.json'}")
    return 0
