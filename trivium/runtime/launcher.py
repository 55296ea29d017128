"""``launch(config)``: run one resolved config (one stage) in its mode, then report.

The session places the components (this process, or Ray actors); the loop of the mode
drives them; the run ends with a final evaluation, a final checkpoint and a summary. A run
that trains what it explores and whose trainer fell short of its steps (tasks failed,
experiences dropped, updates skipped) says what was not trained and why, and exits with
``SHORTFALL_EXIT_CODE`` (see ``trivium.monitor.shortfall``). A run directory that stops
being writable mid-run ends the run with a message, not a traceback (``write_faults.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trivium.monitor.shortfall import Shortfall
from trivium.runtime import loops, stopping
from trivium.runtime.cpu_share import restored_torch_threads
from trivium.runtime.mode_loops import MODE_LOOPS
from trivium.runtime.quiet_output import quiet_third_party_output
from trivium.runtime.session import RunSession
from trivium.runtime.startup_collector import startup_finished
from trivium.runtime.write_faults import write_fault, write_fault_error

logger = logging.getLogger("trivium.runtime")

# A run that ended by itself but trained less than it planned, for a reason it did not ask for.
SHORTFALL_EXIT_CODE = 1


def launch(config: Any, console: Any = None) -> int:
    try:
        return _launch(config, console)
    except Exception as error:
        fault = write_fault(error)
        if fault is None:
            raise
        from trivium.trainer.checkpoint import latest_checkpoint

        run_dir = Path(config.checkpoint_job_dir)
        raise write_fault_error(fault, run_dir, latest_checkpoint(run_dir)) from None


def _launch(config: Any, console: Any) -> int:
    quiet_third_party_output(config.log.level)
    mode = config.mode
    if mode == "bench":
        from trivium.runtime.bench import run_bench

        return run_bench(config, console=console)
    if mode not in MODE_LOOPS:
        raise ValueError(f"unknown mode {mode!r}")
    from trivium.monitor.progress import RunProgress

    with stopping.stop_on_signals():
        session = RunSession(config, console=console)
        startup_finished()  # the components exist: the collector runs again (startup_collector.py)
        try:
            settings = session.settings
            progress = RunProgress(
                total_explore_steps=settings.explorer.total_steps if session.explorer else None,
                total_train_steps=settings.trainer.total_steps if session.trainer else None,
                explore_start_step=session.explorer.step() if session.explorer else 0,
                train_start_step=session.trainer.global_step() if session.trainer else 0,
                console=console,
            )
            with progress, restored_torch_threads():
                MODE_LOOPS.get(mode)(session, progress)
            finish(session)
            shortfall = record_shortfall(session)
        finally:
            session.close()
    report(session, console)
    if stopping.stop_requested():
        logger.warning("the run stopped early (%s); it resumes with continue_from_checkpoint: true", stopping.stop_reason())
        return stopping.exit_code()
    if shortfall is not None and shortfall.falls_short:
        text = "the run fell short: " + ". ".join(shortfall.lines())
        if shortfall.is_error:
            logger.error("%s", text)
            return SHORTFALL_EXIT_CODE
        logger.warning("%s", text)
    return 0


def finish(session: RunSession) -> None:
    """Final evaluation (unless the last step just had one) and the final checkpoint."""
    explorer, trainer = session.explorer, session.trainer
    if explorer is not None and session.has_eval_sets:
        step = explorer.step()
        last_eval_step = session.eval_history[-1][0] if session.eval_history else None
        if last_eval_step != step:
            # The last trained weights may not have been synced yet.
            if trainer is not None and explorer.served_version() != trainer.model_version():
                session.sync_now(copy=False)
            loops.evaluate(session, step)
    if trainer is not None and trainer.global_step() > 0:
        session.save_checkpoint(final=True)


def record_shortfall(session: RunSession) -> Shortfall | None:
    """What a run that trains what it explores did not train, logged as ``shortfall/*`` trainer
    metrics when it fell short; None for other modes, a stopped run, or an unknown step count."""
    traits = session.settings.traits
    if not (traits.trains and traits.reads_training_tasksets) or stopping.stop_requested():
        return None
    planned = session.settings.trainer.total_steps
    if not planned:
        return None
    step = session.trainer.global_step()
    shortfall = session.tally.shortfall(planned_steps=planned, trained_steps=step)
    if shortfall.falls_short:
        session.log_trainer(shortfall.to_metrics(), step)
    return shortfall


def report(session: RunSession, console: Any = None) -> None:
    from rich.console import Console

    from trivium.monitor.report import write_report
    from trivium.monitor.summary import print_summary

    console = console or Console(highlight=False)
    try:
        write_report(session.run_dir)  # draws the plots into plots/ and embeds them
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
