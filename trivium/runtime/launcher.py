"""``launch(config)``: run one resolved config (one stage) in its mode, then report.

Placement is in-process: ``colocate`` in one thread, ``both`` in two threads. The
components keep the same interfaces when they are placed on Ray actors across processes.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from trivium.runtime import loops, stopping
from trivium.runtime.session import RunSession

LOOPS = {
    "colocate": loops.run_colocate,
    "both": loops.run_both,
    "train": loops.run_train,
    "explore": loops.run_explore,
}

logger = logging.getLogger("trivium.runtime")


def expected_explore_steps(config: Any) -> int | None:
    if config.buffer.total_steps:
        return int(config.buffer.total_steps)
    if config.trainer.total_steps:
        per_step = config.buffer.batch_size * config.algorithm.repeat_times
        return math.ceil(config.trainer.total_steps * config.buffer.train_batch_size / max(1, per_step))
    return None


def launch(config: Any, console: Any = None) -> int:
    mode = config.mode
    if mode == "bench":
        from trivium.runtime.bench import run_bench

        return run_bench(config, console=console)
    if mode not in LOOPS:
        raise ValueError(f"unknown mode {mode!r}")
    from trivium.monitor.progress import RunProgress

    session = RunSession(config, with_trainer=mode != "explore", with_explorer=mode != "train", console=console)
    progress = RunProgress(
        total_explore_steps=expected_explore_steps(config) if session.explorer else None,
        total_train_steps=config.trainer.total_steps if session.trainer else None,
        explore_start_step=session.explorer.state.step if session.explorer else 0,
        train_start_step=session.trainer.global_step if session.trainer else 0,
        console=console,
    )
    try:
        with stopping.stop_on_signals():
            with progress:
                LOOPS[mode](session, progress)
            finish(session)
    finally:
        session.close()
    report(session, console)
    if stopping.stop_requested():
        logger.warning("the run stopped early (%s); it resumes with continue_from_checkpoint: true", stopping.stop_reason())
    return stopping.exit_code()


def finish(session: RunSession) -> None:
    """Final evaluation (unless the last step just had one) and the final checkpoint."""
    explorer = session.explorer
    if explorer is not None and explorer.eval_sets:
        last_eval_step = session.eval_history[-1][0] if session.eval_history else None
        if last_eval_step != explorer.state.step:
            if session.trainer is not None and session.engines:
                # The last trained weights may not have been synced yet.
                if session.engines[0].version() != session.trainer.model_version:
                    session.publish_weights(copy=False)
                    session.load_weights(session.synchronizer.poll())
            loops.evaluate(session, explorer.state.step)
    if session.trainer is not None and session.trainer.global_step > 0:
        session.save_checkpoint(final=True)


def report(session: RunSession, console: Any = None) -> None:
    from rich.console import Console

    from trivium.monitor.plots import write_plots
    from trivium.monitor.report import write_report
    from trivium.monitor.summary import print_summary

    console = console or Console(highlight=False)
    try:
        write_plots(session.run_dir)
        write_report(session.run_dir)
    except Exception as error:  # a plotting problem must not hide the run's results
        logger.warning("could not write plots or report: %s", error)
    print_summary(session.run_dir, console=console)
    for line in eval_change_lines(session.eval_history):
        console.print(line)


def eval_change_lines(history: list[tuple[int, dict[str, float]]]) -> list[str]:
    """How each eval set's accuracy moved over this run (stage), first evaluation to last."""
    if len(history) < 2:
        return []
    (first_step, first), (last_step, last) = history[0], history[-1]
    lines = []
    for key in sorted(first):
        if key.endswith("/accuracy") and key in last:
            name = key.removeprefix("eval/").removesuffix("/accuracy")
            change = 100 * (last[key] - first[key])
            lines.append(
                f"held-out accuracy on {name}: {first[key]:.1%} at step {first_step} -> "
                f"{last[key]:.1%} at step {last_step} ({change:+.1f} points)"
            )
    return lines
