"""``mode: bench``: evaluate models on the eval tasksets and print a table.

What is evaluated: the base model when the run directory holds no checkpoint, otherwise
every checkpoint in it (only the newest with ``explorer.bench_on_latest_checkpoint``), or
the external API model when ``model.external_model.enable`` is set. Results go to
``<run dir>/bench/results.json`` and the metrics file.
"""

from __future__ import annotations

import json
from typing import Any

from trivium.runtime import builders
from trivium.trainer import checkpoint as ckpt


def bench_targets(config: Any) -> list[tuple[str, str | None, int]]:
    """(label, model path, version) of each model to evaluate."""
    if config.model.external_model.enable:
        return [(f"external:{config.model.external_model.model_name}", None, 0)]
    run_dir = builders.run_dir_of(config)
    steps = ckpt.list_checkpoints(run_dir)
    if config.explorer.bench_on_latest_checkpoint and steps:
        steps = steps[-1:]
    if not steps:
        return [("base", config.model.model_path, 0)]
    return [(f"global_step_{s}", str(ckpt.step_dir(run_dir, s) / "actor"), s) for s in steps]


def run_bench(config: Any, console: Any = None) -> int:
    from rich.console import Console
    from rich.table import Table

    from trivium.monitor.base import create_monitor
    from trivium.monitor.logs import setup_component_logger

    console = console or Console(highlight=False)
    run_dir = builders.run_dir_of(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = setup_component_logger(run_dir, "bench", config.log.level, config.log.group_by_node)
    monitor = create_monitor(
        run_dir=run_dir,
        project=config.project,
        name=config.name,
        role="explorer",
        monitor_type=config.monitor.monitor_type,
        monitor_args=dict(config.monitor.monitor_args or {}),
        console=console,
    )
    results: list[dict[str, Any]] = []
    try:
        for label, model_path, version in bench_targets(config):
            engines = builders.build_engines(config, model_path)
            wrappers = builders.build_wrappers(config, engines)
            pool = builders.build_runner_pool(config, wrappers, builders.build_auxiliary_wrappers(config), run_dir)
            explorer = builders.build_explorer(
                config,
                taskset_reader=None,
                writer=None,
                pool=pool,
                eval_pool=pool,
                version_fn=lambda version=version: version,
            )
            explorer.logger = log
            metrics = explorer.evaluate()
            pool.shutdown()
            monitor.log(metrics, version)
            results.append({"model": label, "version": version, **metrics})
            log.info("bench %s: %s", label, metrics)
    finally:
        monitor.close()
    out = run_dir / "bench"
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
