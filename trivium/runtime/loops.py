"""The loop of each mode. Each reads top to bottom: explore, train, synchronize, evaluate.

- ``colocate``: explorer and trainer take turns in one thread.
- ``both``: explorer and trainer run concurrently in two threads of this process; the
  synchronizer decides when the explorer waits for new weights.
- ``train``: the trainer alone, from the experience buffer or a dataset (sft, dpo).
- ``explore``: the explorer alone; it picks up newer checkpoints from the run directory.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any

import torch

from trivium.buffer.base import BufferExhausted
from trivium.runtime.cpu_share import restored_torch_threads, split_cores
from trivium.runtime.session import RunSession, load_actor_weights
from trivium.runtime.stopping import stop_requested
from trivium.sync.synchronizer import WeightUpdate
from trivium.trainer import checkpoint as ckpt


def _log(monitor: Any, metrics: dict[str, float] | None, step: int) -> None:
    if monitor is not None and metrics:
        monitor.log(metrics, step)


def _should_eval(session: RunSession, step: int) -> bool:
    interval = session.config.explorer.eval_interval
    return bool(session.explorer.eval_sets) and interval > 0 and step % interval == 0


def evaluate(session: RunSession, step: int) -> dict[str, float]:
    metrics = session.explorer.evaluate()
    session.park_models()
    _log(session.explorer_monitor, metrics, step)
    session.eval_history.append((step, metrics))
    return metrics


def startup_eval(session: RunSession) -> None:
    """Evaluate the initial model at step 0; not on a restart."""
    if session.config.explorer.eval_on_startup and session.explorer.state.step == 0 and session.explorer.eval_sets:
        evaluate(session, 0)


def explore_once(session: RunSession, progress: Any) -> dict[str, float] | None:
    """One explorer step, logged; None when the tasksets are exhausted."""
    metrics = session.explorer.explore_step()
    session.park_models()
    if metrics is not None:
        session.save_explorer_position()
        _log(session.explorer_monitor, metrics, session.explorer.state.step)
        if progress:
            progress.update_explore(session.explorer.state.step)
    return metrics


def eval_if_due(session: RunSession) -> None:
    step = session.explorer.state.step
    if _should_eval(session, step):
        evaluate(session, step)


def train_available(session: RunSession, reader: Any, pending: int, progress: Any) -> int:
    """Colocate: train on every full batch the explorer has written; returns what is left."""
    batch_size = session.config.buffer.train_batch_size
    total = session.config.trainer.total_steps
    while pending >= batch_size and not (total and session.trainer.global_step >= total) and not stop_requested():
        experiences = reader.read(batch_size, timeout=5.0)
        pending -= sum(not e.is_expert for e in experiences)
        session.remember_probes(experiences)
        metrics = session.trainer.train_step(experiences)
        _log(session.trainer_monitor, metrics, session.trainer.global_step)
        if progress:
            progress.update_train(session.trainer.global_step)
        if session.should_save():
            session.save_checkpoint(final=False)
    return pending


def run_colocate(session: RunSession, progress: Any = None) -> None:
    explorer, sync = session.explorer, session.synchronizer
    reader = session.make_train_reader()
    startup_eval(session)
    pending = 0
    while True:
        metrics = explore_once(session, progress)
        if metrics is None:
            break
        pending += int(metrics.get("rollout/num_experiences", 0))
        if explorer.state.step % sync.sync_interval == 0:
            before = session.trainer.global_step
            pending = train_available(session, reader, pending, progress)
            if session.trainer.global_step > before:
                # One thread: the engine copies the tensors, so no snapshot is needed.
                session.publish_weights(copy=False)
                sync_metrics = session.load_weights(sync.poll())
                _log(session.explorer_monitor, sync_metrics, explorer.state.step)
        eval_if_due(session)
        total = session.config.trainer.total_steps
        if (total and session.trainer.global_step >= total) or stop_requested():
            break
    if pending:
        session.trainer_log.info("%d experiences left over (less than one training batch)", pending)


def run_both(session: RunSession, progress: Any = None) -> None:
    with restored_torch_threads():
        _run_both(session, progress)


def _run_both(session: RunSession, progress: Any = None) -> None:
    explorer, sync, trainer = session.explorer, session.synchronizer, session.trainer
    reader = session.make_train_reader()
    batch_size = session.config.buffer.train_batch_size
    total = session.config.trainer.total_steps
    errors: list[BaseException] = []
    stop = threading.Event()
    trainer_threads = None
    if trainer.device.type == "cpu":
        trainer_threads, explorer_threads = split_cores()
        for engine in session.engines:
            if hasattr(engine, "compute_threads"):
                engine.compute_threads = explorer_threads

    def explorer_loop() -> None:
        try:
            startup_eval(session)
            while not stop.is_set() and not stop_requested():
                next_step = explorer.state.step + 1
                update = None
                if sync.sync_style == "trainer_driven":
                    update = sync.poll()
                elif sync.explorer_should_sync(next_step):
                    if sync.sync_style == "explorer_driven":
                        update = sync.request_sync()
                    else:
                        update = sync.wait_for(sync.required_version(next_step))
                if update is not None:
                    _log(session.explorer_monitor, session.load_weights(update), explorer.state.step)
                if explore_once(session, progress) is None:
                    break
                eval_if_due(session)
        except BaseException as error:
            errors.append(error)
            session.explorer_log.error("explorer failed: %s", traceback.format_exc())
            stop.set()
        finally:
            session.writer.finish()

    def trainer_loop() -> None:
        if trainer_threads:
            torch.set_num_threads(trainer_threads)
        try:
            while not stop.is_set() and not stop_requested() and not (total and trainer.global_step >= total):
                try:
                    experiences = reader.read(batch_size)
                except BufferExhausted:
                    break
                if len(experiences) < batch_size:
                    session.trainer_log.info("read a partial batch of %d; training on it", len(experiences))
                if not experiences:
                    continue
                session.remember_probes(experiences)
                metrics = trainer.train_step(experiences)
                _log(session.trainer_monitor, metrics, trainer.global_step)
                if progress:
                    progress.update_train(trainer.global_step)
                if sync.trainer_should_publish(trainer.model_version):
                    session.publish_weights(copy=True)
                if session.should_save():
                    session.save_checkpoint(final=False)
        except BaseException as error:
            errors.append(error)
            session.trainer_log.error("trainer failed: %s", traceback.format_exc())
            stop.set()
        finally:
            session.publish_weights(copy=True)
            sync.trainer_finished()
            stop.set()  # nothing will consume further rollouts
            reader.close()

    threads = [
        threading.Thread(target=explorer_loop, name="explorer", daemon=True),
        threading.Thread(target=trainer_loop, name="trainer", daemon=True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def run_train(session: RunSession, progress: Any = None) -> None:
    from trivium.buffer.factory import create_reader

    config, trainer = session.config, session.trainer
    storage = config.buffer.trainer_input.experience_buffer
    dataset_mode = config.algorithm.policy_loss_fn in ("sft", "dpo") or storage.storage_type == "file"
    reader = (
        create_reader(storage, tokenizer=session.tokenizer, total_epochs=config.buffer.total_epochs)
        if dataset_mode
        else create_reader(storage)
    )
    total = config.trainer.total_steps
    epochs = config.buffer.total_epochs
    batch_size = config.buffer.train_batch_size
    while not (total and trainer.global_step >= total) and not stop_requested():
        # Dataset readers cycle; without total_steps, total_epochs ends the stage.
        if not total and getattr(reader, "epoch", 0) >= epochs:
            break
        try:
            experiences = reader.read(batch_size)
        except BufferExhausted:
            break
        if not experiences:
            break
        metrics = trainer.train_step(experiences)
        _log(session.trainer_monitor, metrics, trainer.global_step)
        if progress:
            progress.update_train(trainer.global_step)
        if session.should_save():
            session.save_checkpoint(final=False)


def run_explore(session: RunSession, progress: Any = None) -> None:
    """Explore alone; between steps, load a newer checkpoint if a trainer wrote one."""
    explorer = session.explorer
    startup_eval(session)
    while not stop_requested():
        latest = ckpt.latest_checkpoint(session.run_dir)
        if latest is not None and latest > session.engines[0].version():

            weights = load_actor_weights(ckpt.step_dir(session.run_dir, latest) / "actor")
            _log(session.explorer_monitor, session.load_weights(WeightUpdate(latest, weights=weights)), explorer.state.step)
        if explore_once(session, progress) is None:
            break
        eval_if_due(session)
    session.writer.finish()
