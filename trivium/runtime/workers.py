"""The two sides of a run, each an object its placement builds in this process or in an actor.

``ExplorerWorker`` owns the model wrappers around the rollout engines its placement hands in
(built here, or engine actors seen through the engine interface), the runner pool, the
experience writer and the explorer. ``TrainerWorker`` owns the trainer, its buffer reader,
its checkpoints and the sender of the run's weight transport (``trivium.sync.transport``),
which stages each version wherever the transport carries it. Their methods are the whole
vocabulary of the mode loops (``trivium.runtime.worker_sides`` types them): plain values in,
plain values out, so a Ray actor handle serves them unchanged.

Neither reads the config: they build their parts from the typed ``RunSettings`` through
``trivium.runtime.builders``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import torch

from trivium.buffer.base import BufferExhausted
from trivium.config.lora_serving import serves_adapter
from trivium.core.metric_names import CRITIC_UPDATE_SKIPPED, IDLE_TRAINER, UPDATE_SKIPPED
from trivium.models.engine.base import InferenceEngine
from trivium.models.lora_delta import update_bytes
from trivium.models.model_dir import check_model_dir
from trivium.runtime import builders, trained_samples
from trivium.runtime.actor_weights import load_actor_weights, service_sampler_path
from trivium.runtime.settings import RunSettings
from trivium.sync.self_check import check_sync
from trivium.sync.transport import WeightTransport
from trivium.sync.weight_update import WeightUpdate
from trivium.trainer import checkpoint as ckpt

EXPLORER_STATE_FILE = "explorer_state.json"
# In a checkpoint: the trainer's reader position, or the experiences it had not read yet.
TRAINER_INPUT_FILE = "trainer_input.json"


class ExplorerWorker:
    def __init__(self, settings: RunSettings, *, engines: list[InferenceEngine]):
        """``engines``: the rollout engines, handed in by the placement (here, or over Ray)."""
        from trivium.buffer.factory import create_writer
        from trivium.monitor.logs import setup_component_logger

        self.settings = settings
        self.run_dir = settings.run_dir
        self.log = setup_component_logger(
            self.run_dir, settings.log.explorer_name, settings.log.level, settings.log.group_by_node
        )
        explorer = settings.explorer
        self.engines = engines
        self.wrappers = builders.build_wrappers(explorer.wrapper, self.engines)
        self.auxiliary_wrappers = builders.build_auxiliary_wrappers(explorer)
        self.workflow_api = builders.build_workflow_api(settings, self.wrappers, self.auxiliary_wrappers)
        pool = builders.build_runner_pool(settings, self.wrappers, self.auxiliary_wrappers, self.workflow_api)
        explores_tasksets = settings.traits.reads_training_tasksets
        self.writer = create_writer(explorer.experience_buffer) if explores_tasksets else None
        self.explorer = builders.build_explorer(
            settings,
            taskset_reader=builders.build_taskset_reader(settings) if explores_tasksets else None,
            writer=self.writer,
            pool=pool,
            version_fn=self.served_version,
            auxiliary=self.auxiliary_wrappers,
        )
        self.explorer.logger = self.log
        self._stop_reports = threading.Event()
        self._start_runner_reports(explorer.runner_state_report_interval)

    # ------------------------------------------------------------------ state
    def step(self) -> int:
        return self.explorer.state.step

    def served_version(self) -> int:
        return self.engines[0].version()

    def has_eval_sets(self) -> bool:
        return bool(self.explorer.eval_sets)

    def state_dict(self) -> dict[str, Any]:
        return self.explorer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.explorer.load_state_dict(state)

    @property
    def position_file(self) -> Path:
        return self.run_dir / EXPLORER_STATE_FILE

    def position_saved(self) -> bool:
        return self.position_file.exists()

    def saved_position_step(self) -> int | None:
        """The last step the explorer recorded in the run directory (it may be past the last checkpoint)."""
        try:
            return int(json.loads(self.position_file.read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def restore_position(self) -> bool:
        """Explore-only runs have no checkpoints; their position file says where they stopped."""
        if not self.position_file.exists():
            return False
        self.load_state_dict(json.loads(self.position_file.read_text()))
        self.log.info("resumed the explorer at step %d", self.step())
        return True

    def restore_checkpoint(self, step: int) -> None:
        state_file = ckpt.step_dir(self.run_dir, step) / EXPLORER_STATE_FILE
        if state_file.exists():
            self.load_state_dict(json.loads(state_file.read_text()))

    # ------------------------------------------------------------------ work
    def explore_once(self) -> dict[str, float] | None:
        """One explorer step; its metrics, or None when the tasksets are exhausted."""
        metrics = self.explorer.explore_step()
        self._release_engine_threads()
        if metrics is not None:
            self._save_position()
        return metrics

    def evaluate(self) -> dict[str, float]:
        metrics = self.explorer.evaluate()
        self._release_engine_threads()
        return metrics

    def finish_writing(self) -> None:
        """No more experiences will come from this explorer (readers then drain the buffer)."""
        if self.writer is not None:
            self.writer.finish()

    def _save_position(self) -> None:
        """Where the explorer stands in its tasksets, written atomically after each step."""
        tmp = self.position_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state_dict()))
        tmp.replace(self.position_file)

    def sample_through(self, engines: list[InferenceEngine]) -> None:
        """Run the workflows (in serve mode, the evaluations) on ``engines`` from now on, in place
        of the engines this worker was built with: serve mode hands in its pool's routed
        engines, so an evaluation never samples from an engine that is loading or has failed.
        Weights still reach the engines this worker was built with (``self.engines``)."""
        old_pool, old_wrappers, old_api = self.explorer.runner_pool, self.wrappers, self.workflow_api
        explorer = self.settings.explorer
        self.wrappers = builders.build_wrappers(explorer.wrapper, engines)
        self.workflow_api = builders.build_workflow_api(self.settings, self.wrappers, self.auxiliary_wrappers)
        pool = builders.build_runner_pool(self.settings, self.wrappers, self.auxiliary_wrappers, self.workflow_api)
        self.explorer.runner_pool = self.explorer.eval_runner_pool = pool
        old_pool.shutdown()
        if old_api is not None:
            old_api.close()
        for wrapper in old_wrappers:
            wrapper.close()

    def _release_engine_threads(self) -> None:
        # Between steps the wrappers' serving threads exit (see RequestBatcher).
        for wrapper in (*self.wrappers, *self.auxiliary_wrappers):
            wrapper.park()

    # ------------------------------------------------------------------ weights
    def load_weights(self, update: WeightUpdate) -> dict[str, float]:
        """Load an in-memory or file update into every engine and confirm its version."""
        start = time.perf_counter()
        # A training service's update is a path its sampler loads (engines with use_sampler).
        weights = None if update.sampler_path is not None else update.load()
        for engine in self.engines:
            confirmed = (engine.use_sampler(update.sampler_path, update.version) if weights is None
                         else engine.update_weights(weights, update.version))
            if confirmed != update.version:
                raise RuntimeError(f"engine confirmed version {confirmed} after loading {update.version}")
        # Under LoRA only the adapter travels: compare with the model's size.
        sent = {} if weights is None else {"sync/bytes": float(update_bytes(weights))}
        return {"time/sync": time.perf_counter() - start, **sent, **update.metrics}

    def hold_weights(self, update: WeightUpdate) -> int:
        """Engines that can (``holds_outside_weights``) compute with the update's tensors
        themselves from now on; the bytes of their own weights given up."""
        weights = update.load()
        freed = sum(engine.hold_weights(weights) for engine in self.engines if engine.holds_outside_weights)
        if freed:
            self.log.info(
                "the rollout engines compute with the trainer's weights (explorer and trainer take turns, "
                "synced every step): %.1f MB of their own copies freed", freed / 2**20,
            )
        return freed

    def load_checkpoint_weights(self, step: int) -> dict[str, float]:
        """Serve the actor weights of ``global_step_<step>`` (resume, explore mode, bench)."""
        return self.load_model_weights(str(ckpt.step_dir(self.run_dir, step) / "actor"), step)

    def load_model_weights(self, model_dir: str, version: int) -> dict[str, float]:
        sampler_path = service_sampler_path(Path(model_dir))
        if sampler_path is not None:
            return self.load_weights(WeightUpdate(version, sampler_path=sampler_path))
        rollout = self.settings.explorer.rollout
        merge = not serves_adapter(rollout.engine_type, rollout.options.get("enable_lora"))
        return self.load_weights(WeightUpdate(version, weights=load_actor_weights(Path(model_dir), merge_adapter=merge)))

    def self_check(self, update: WeightUpdate) -> dict[str, float]:
        """Engine vs trainer logprobs of the update's probes, when it carries some."""
        if not update.probes:
            return {}
        return check_sync(update.probe_scores, self.engines[0], update.probes, version=update.version, logger=self.log)

    # ------------------------------------------------------------------ tear-down
    def _start_runner_reports(self, interval: float) -> None:
        """Print every runner's status every ``interval`` seconds (0 turns it off)."""
        if not interval or interval <= 0:
            return
        from trivium.monitor.progress import format_runner_states

        def report() -> None:
            while not self._stop_reports.wait(interval):
                line = format_runner_states(self.explorer.runner_pool.snapshot_states())
                self.log.info(line)
                print(line, flush=True)

        threading.Thread(target=report, name="runner-state-report", daemon=True).start()

    def close(self) -> None:
        self._stop_reports.set()
        self.explorer.runner_pool.shutdown()
        if self.workflow_api is not None:
            self.workflow_api.close()
        for wrapper in (*self.wrappers, *self.auxiliary_wrappers):
            wrapper.close()
        for engine in self.engines:
            engine.close()


class TrainerWorker:
    def __init__(
        self,
        settings: RunSettings,
        *,
        transport: WeightTransport,
        resume_step: int | None = None,
        rank_launcher: Any = None,
    ):
        """``transport``: the synchronizer's weight transport, whose sender this side builds.
        ``rank_launcher``: where a trainer of several ranks starts ranks 1..N-1 (local processes by default)."""
        from transformers import AutoTokenizer

        from trivium.monitor.logs import setup_component_logger

        self.settings = settings
        self.run_dir = settings.run_dir
        self.log = setup_component_logger(
            self.run_dir, settings.log.trainer_name, settings.log.level, settings.log.group_by_node
        )
        torch.manual_seed(settings.seed)
        trainer_settings = settings.trainer
        check_model_dir(trainer_settings.model_path, needs_tokenizer=True)
        self.tokenizer = AutoTokenizer.from_pretrained(trainer_settings.model_path)
        pad = self.tokenizer.pad_token_id
        self.trainer = builders.trainer_class(trainer_settings)(
            trainer_settings,
            run_dir=self.run_dir,
            tokenizer=self.tokenizer,
            pad_token_id=pad if pad is not None else 0,
            logger=self.log,
            rank_launcher=rank_launcher,
        )
        if resume_step is not None:
            self.trainer.load_checkpoint(resume_step)
            self.log.info("resumed the trainer from global_step_%d", resume_step)
        self.reader = builders.build_train_reader(settings, self.tokenizer)
        # The newest explorer step among the experiences read so far: a checkpoint must record
        # an explorer position at least this far on.
        self.newest_explore_step = 0
        self.probe_experiences: list[Any] = []
        self.last_samples: list[str] = []
        self.publications = 0  # weight publications so far; every self_check_interval-th is checked
        self.weight_sender = transport.sender()

    # ------------------------------------------------------------------ state
    def global_step(self) -> int:
        return self.trainer.global_step

    def model_version(self) -> int:
        return self.trainer.model_version

    def reached_total_steps(self) -> bool:
        total = self.settings.trainer.total_steps
        return bool(total) and self.trainer.global_step >= total

    def dataset_epoch(self) -> int:
        return int(getattr(self.reader, "epoch", 0))

    # ------------------------------------------------------------------ work
    def train_once(self, timeout: float | None = None) -> tuple[dict[str, float], int] | None:
        """Read one batch and train on it: (metrics, rollouts consumed); None when the buffer is exhausted.

        An empty read (nothing arrived within the timeout) returns empty metrics and 0.
        """
        # Where no stop path hears of a lost rank (a Ray trainer actor), it is named here, before
        # the wait for experiences, rather than by the next step's first collective.
        self.trainer.raise_if_ranks_lost()
        if self.settings.trainer.cpu_threads:
            torch.set_num_threads(self.settings.trainer.cpu_threads)
        batch_size = self.settings.train_batch_size
        read_start = time.perf_counter()
        try:
            experiences = self.reader.read(batch_size, timeout=timeout)
        except BufferExhausted:
            return None
        if not experiences:
            return {}, 0
        waited = time.perf_counter() - read_start  # waiting for the explorer's experiences
        if len(experiences) < batch_size:
            self.log.info("read a partial batch of %d; training on it", len(experiences))
        sampled = [e.explore_step for e in experiences if not e.is_expert]
        self.newest_explore_step = max([self.newest_explore_step, *sampled])
        self.probe_experiences = [e for e in experiences[:2] if e.response_length > 0]
        metrics = self.trainer.train_step(experiences)
        metrics[IDLE_TRAINER] = waited
        self.last_samples = [f"{e.task_id}#{e.run_id}" for e in experiences if not e.is_expert]
        skipped = skipped_update(metrics)
        trained_samples.record_step(self.run_dir, self.trainer.global_step, experiences, skipped=skipped)
        if skipped:
            self.log.error("step %d: %s; its %d samples were not trained: %s", self.trainer.global_step, skipped,
                           len(self.last_samples), ", ".join(self.last_samples))
        return metrics, sum(not e.is_expert for e in experiences)

    def drop_untrained(self, count: int) -> int:
        """Read up to ``count`` explored experiences that are there now and leave them untrained
        (colocate: left over at a weight sync, stale after it); returns how many."""
        # ``mix`` adds expert rows to what it reads: take the explored ones from its own reader.
        reader = getattr(self.reader, "rl_reader", self.reader)
        try:
            dropped = reader.read(count, timeout=0.0)
        except BufferExhausted:
            return 0
        if dropped:
            self.log.warning("discarded %d experiences left over at a weight sync: %s", len(dropped),
                             ", ".join(f"{e.task_id}#{e.run_id}" for e in dropped))
        return len(dropped)

    def samples_of_last_step(self) -> list[str]:
        """``task_id#run_id`` of each sample the last step read (expert rows left out)."""
        return list(self.last_samples)

    def newest_explore_step_read(self) -> int:
        return self.newest_explore_step

    def close_reader(self) -> None:
        self.reader.close()

    # ------------------------------------------------------------------ weights
    def stage_weights(self, *, copy: bool) -> WeightUpdate:
        """The current weights, staged by the transport's sender, with self-check scores when due."""
        interval = self.settings.sync.self_check_interval
        due = bool(interval) and self.publications % interval == 0
        self.publications += 1
        # The check costs a forward pass on each side; a broken transport fails every sync alike.
        probes = (self.probe_experiences[-2:] or None) if due else None
        scores = self.trainer.probe_logprobs(probes) if probes else None
        version = self.trainer.model_version
        if getattr(self.trainer, "publishes_sampler_weights", False):
            # The weights live on a training service: the update is where its sampler finds them.
            update = WeightUpdate(version=version, sampler_path=self.trainer.publish_sampler(version))
        else:
            update = self.weight_sender.stage(self.trainer, version, copy=copy)
        update.probes, update.probe_scores = probes, scores
        return update

    def current_weights(self) -> WeightUpdate:
        """The weights the trainer holds now, for an explorer in this process (a resume): no copy."""
        version = self.trainer.model_version
        if getattr(self.trainer, "publishes_sampler_weights", False):
            saved = self.trainer.sampler_path if self.trainer.sampler_version == version else None
            return WeightUpdate(version, sampler_path=saved or self.trainer.publish_sampler(version))
        return WeightUpdate(version, weights=self.trainer.weights_for_sync())

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, *, final: bool, explorer_state: dict[str, Any] | None = None) -> str:
        """Save the trainer, its input and the explorer's position as one consistent cut.

        With an explorer, the unread experiences kept are those sampled up to the explorer
        step in ``explorer_state``: a resumed explorer continues after that step.
        """
        policy = self.settings.checkpoints.save_hf_checkpoint
        export_hf = policy == "always" or (policy == "last" and final)
        max_explore_step = int(explorer_state["step"]) if explorer_state is not None else None
        extra = {TRAINER_INPUT_FILE: self.reader.state_dict(max_explore_step)}
        if explorer_state is not None:
            extra[EXPLORER_STATE_FILE] = explorer_state
        path = self.trainer.save_checkpoint(export_hf=export_hf, extra_files=extra)
        if policy == "last" and final:
            ckpt.strip_hf_exports(self.run_dir, except_step=self.trainer.global_step)
        ckpt.prune_checkpoints(self.run_dir, self.settings.checkpoints.max_checkpoints_to_keep)
        self.log.info("saved checkpoint %s", path)
        return str(path)

    def restore_input(self, step: int) -> tuple[int, int] | None:
        """Put the reader where checkpoint ``step`` left it: (unread experiences put back,
        buffered ones dropped as sampled after the checkpoint); None for a checkpoint that
        did not record its input."""
        state_file = ckpt.step_dir(self.run_dir, step) / TRAINER_INPUT_FILE
        if not state_file.exists():
            self.log.warning("%s does not record the trainer's input; reading on from where the buffer is", state_file.parent)
            return None
        restored = self.reader.load_state_dict(json.loads(state_file.read_text(encoding="utf-8")))
        return restored.kept, restored.dropped

    def discard_unread(self) -> int:
        """Drop every buffered experience an explorer sampled (a run starting again from step 0)."""
        return self.reader.load_state_dict(self.reader.state_dict(max_explore_step=0)).dropped

    def checkpoint_due(self) -> bool:
        interval = self.settings.checkpoints.save_interval
        return bool(interval) and self.trainer.global_step % interval == 0

    def close(self) -> None:
        self.weight_sender.close()
        self.trainer.close()


def skipped_update(metrics: dict[str, float]) -> str | None:
    """Why a trainer step's update was left out, from its metrics; None when it was applied."""
    parts = [f"{int(metrics[key])} {model} update(s) skipped" for key, model in
             ((UPDATE_SKIPPED, "actor"), (CRITIC_UPDATE_SKIPPED, "critic")) if metrics.get(key)]
    return f"non-finite gradients ({', '.join(parts)})" if parts else None
