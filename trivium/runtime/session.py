"""One run (or one stage) with its components, built once from the resolved config.

The session owns set-up and tear-down: loggers, monitors, the trainer, the engines and the
explorer, resuming from the run directory, checkpoints, the synchronizer and the final
summary. The mode loops in ``trivium.runtime.loops`` only call its methods.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from trivium.errors import UserError
from trivium.runtime import builders
from trivium.sync.self_check import check_sync, trainer_logprobs
from trivium.sync.synchronizer import Synchronizer, WeightUpdate
from trivium.trainer import checkpoint as ckpt

EXPLORER_STATE_FILE = "explorer_state.json"


class RunSession:
    def __init__(self, config: Any, *, with_trainer: bool, with_explorer: bool, console: Any = None):
        from trivium.monitor.logs import setup_component_logger

        self.config = config
        self.run_dir = builders.run_dir_of(config)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        level, by_node = config.log.level, config.log.group_by_node
        self.explorer_log = setup_component_logger(self.run_dir, config.explorer.name or "explorer", level, by_node)
        self.trainer_log = setup_component_logger(self.run_dir, config.trainer.name or "trainer", level, by_node)
        self.console = console
        torch.manual_seed(config.seed)

        # A later stage's model_path already points at the previous stage's final weights.
        self.model_path = config.model.model_path
        self.resume_step = ckpt.latest_checkpoint(self.run_dir) if config.continue_from_checkpoint else None
        self.trainer = self.explorer = None
        self.engines: list[Any] = []
        self.wrappers: list[Any] = []
        self.auxiliary_wrappers: list[Any] = []
        self.writer = None
        self.tokenizer = None
        self.trainer_monitor = self.explorer_monitor = None
        config_dict = OmegaConf.to_container(OmegaConf.structured(config), resolve=True)
        if with_trainer:
            self.trainer_monitor = self._monitor("trainer", config_dict)
            self._build_trainer()
        if with_explorer:
            self.explorer_monitor = self._monitor("explorer", config_dict)
            self._build_explorer()
        self.synchronizer = self._build_synchronizer()
        self.probe_experiences: list[Any] = []
        self.publications = 0  # weight publications so far; every self_check_interval-th is checked
        self.eval_history: list[tuple[int, dict[str, float]]] = []

    # ------------------------------------------------------------------ building
    def _monitor(self, role: str, config_dict: dict) -> Any:
        from trivium.monitor.base import create_monitor

        monitor = self.config.monitor
        return create_monitor(
            run_dir=self.run_dir,
            project=self.config.project,
            name=self.config.name,
            role=role,
            monitor_type=monitor.monitor_type,
            monitor_args=dict(monitor.monitor_args or {}),
            config_dict=config_dict,
            enable_ray_timeline=monitor.enable_ray_timeline,
            console=self.console,
        )

    def _build_trainer(self) -> None:
        from transformers import AutoTokenizer

        from trivium.trainer.trainer import Trainer

        settings = builders.trainer_settings(self.config, self.model_path)
        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer
        self.trainer = Trainer(
            settings,
            run_dir=self.run_dir,
            tokenizer=tokenizer,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
            logger=self.trainer_log,
        )
        if self.resume_step is not None:
            self.trainer.load_checkpoint(self.resume_step)
            self.trainer_log.info("resumed the trainer from global_step_%d", self.resume_step)

    def _build_explorer(self) -> None:
        from trivium.buffer.factory import create_writer

        config = self.config
        self.engines = builders.build_engines(config, self.model_path)
        self.wrappers = builders.build_wrappers(config, self.engines)
        self.auxiliary_wrappers = builders.build_auxiliary_wrappers(config)
        pool = builders.build_runner_pool(config, self.wrappers, self.auxiliary_wrappers, self.run_dir)
        self.writer = create_writer(config.buffer.trainer_input.experience_buffer)
        self.explorer = builders.build_explorer(
            config,
            taskset_reader=builders.build_taskset_reader(config),
            writer=self.writer,
            pool=pool,
            eval_pool=pool,
            version_fn=lambda: self.engines[0].version(),
            auxiliary=self.auxiliary_wrappers,
        )
        self.explorer.logger = self.explorer_log
        if self.resume_step is not None:
            self._resume_explorer(self.resume_step)
        elif self.config.continue_from_checkpoint and self.explorer_position_file.exists():
            # Explore-only runs have no checkpoints; their position file says where they stopped.
            self.explorer.load_state_dict(json.loads(self.explorer_position_file.read_text()))
            self.explorer_log.info("resumed the explorer at step %d", self.explorer.state.step)
        self._start_runner_reports(config.explorer.runner_state_report_interval)

    def _start_runner_reports(self, interval: float) -> None:
        """Print every runner's status every ``interval`` seconds (0 turns it off)."""
        self._stop_reports = threading.Event()
        if not interval or interval <= 0:
            return
        from trivium.monitor.progress import format_runner_states

        def report() -> None:
            while not self._stop_reports.wait(interval):
                line = format_runner_states(self.explorer.runner_pool.snapshot_states())
                self.explorer_log.info(line)
                print(line, flush=True)

        threading.Thread(target=report, name="runner-state-report", daemon=True).start()

    @property
    def explorer_position_file(self) -> Path:
        return self.run_dir / EXPLORER_STATE_FILE

    def save_explorer_position(self) -> None:
        """Where the explorer stands in its tasksets, written atomically after each step."""
        tmp = self.explorer_position_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.explorer.state_dict()))
        tmp.replace(self.explorer_position_file)

    def _resume_explorer(self, step: int) -> None:
        state_file = ckpt.step_dir(self.run_dir, step) / EXPLORER_STATE_FILE
        if state_file.exists():
            self.explorer.load_state_dict(json.loads(state_file.read_text()))
        actor_dir = ckpt.step_dir(self.run_dir, step) / "actor"
        weights = self.trainer.weights_for_sync() if self.trainer else load_actor_weights(actor_dir)
        for engine in self.engines:
            engine.update_weights(weights, step)
        self.explorer_log.info("resumed the explorer at step %d with weight version %d", self.explorer.state.step, step)

    def _build_synchronizer(self) -> Synchronizer:
        config = self.config
        experiences_per_step = config.buffer.batch_size * config.algorithm.repeat_times
        sync = Synchronizer(
            sync_method=config.synchronizer.sync_method or "memory",
            sync_style=config.synchronizer.sync_style,
            sync_interval=config.synchronizer.sync_interval,
            sync_offset=config.synchronizer.sync_offset,
            sync_timeout=config.synchronizer.sync_timeout,
            train_steps_per_explore_step=experiences_per_step / max(1, config.buffer.train_batch_size),
            run_dir=self.run_dir,
            logger=self.explorer_log,
        )
        if self.resume_step is not None:
            sync.confirmed_version = self.resume_step
        return sync

    def make_train_reader(self) -> Any:
        """The trainer's input: the experience buffer, with expert data mixed in for ``mix``."""
        from trivium.buffer.factory import create_reader
        from trivium.trainer.sample_strategy import MixSampler

        config = self.config
        reader = create_reader(config.buffer.trainer_input.experience_buffer)
        if config.algorithm.sample_strategy != "mix":
            return reader
        auxiliary = config.buffer.trainer_input.auxiliary_buffers
        if not auxiliary:
            raise UserError(
                "algorithm.sample_strategy 'mix' needs expert data: add an SFT dataset under "
                "buffer.trainer_input.auxiliary_buffers (e.g. auxiliary_buffers.sft_dataset)."
            )
        expert_config = auxiliary.get("sft_dataset") or next(iter(auxiliary.values()))
        expert = create_reader(expert_config, tokenizer=self.tokenizer, default_seed=config.seed)
        ratio = float((config.algorithm.sample_strategy_args or {}).get("expert_data_ratio", 0.25))
        return MixSampler(reader, expert, ratio)

    # ------------------------------------------------------------------ weights
    def publish_weights(self, *, copy: bool) -> None:
        """Trainer side: hand the current weights to the synchronizer, with self-check scores when due."""
        interval = self.config.synchronizer.self_check_interval
        due = bool(interval) and self.publications % interval == 0
        self.publications += 1
        # The check costs a forward pass on each side; a broken transport fails every sync alike.
        probes = (self.probe_experiences[-2:] or None) if due else None
        scores = trainer_logprobs(self.trainer.actor, probes, self.trainer.pad_token_id) if probes else None
        self.synchronizer.publish(
            self.trainer.model_version, self.trainer.weights_for_sync(), copy=copy, probes=probes, probe_scores=scores
        )

    def load_weights(self, update: WeightUpdate) -> dict[str, float]:
        """Explorer side: load ``update`` into every engine, confirm, and run the self-check."""
        start = time.perf_counter()
        weights = update.load()
        for engine in self.engines:
            confirmed = engine.update_weights(weights, update.version)
            if confirmed != update.version:
                raise RuntimeError(f"engine confirmed version {confirmed} after loading {update.version}")
        self.synchronizer.confirm(update.version)
        metrics = {"time/sync": time.perf_counter() - start}
        probes = getattr(update, "probes", None)
        if probes:
            metrics.update(
                check_sync(update.probe_scores, self.engines[0], probes, version=update.version, logger=self.explorer_log)
            )
        return metrics

    def remember_probes(self, experiences: list[Any]) -> None:
        self.probe_experiences = [e for e in experiences[:2] if e.response_length > 0]

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, *, final: bool) -> Path | None:
        if self.trainer is None:
            return None
        policy = self.config.trainer.save_hf_checkpoint
        export_hf = policy == "always" or (policy == "last" and final)
        extra = {EXPLORER_STATE_FILE: self.explorer.state_dict()} if self.explorer is not None else None
        path = self.trainer.save_checkpoint(export_hf=export_hf, extra_files=extra)
        if policy == "last" and final:
            ckpt.strip_hf_exports(self.run_dir, except_step=self.trainer.global_step)
        ckpt.prune_checkpoints(self.run_dir, self.config.trainer.max_checkpoints_to_keep)
        self.trainer_log.info("saved checkpoint %s", path)
        return path

    def should_save(self) -> bool:
        interval = self.config.trainer.save_interval
        return bool(interval) and self.trainer.global_step % interval == 0

    # ------------------------------------------------------------------ tear-down
    def park_models(self) -> None:
        """Between explorer steps: release the engines' serving threads (see RequestBatcher)."""
        for wrapper in (*self.wrappers, *self.auxiliary_wrappers):
            wrapper.park()

    def close(self) -> None:
        if getattr(self, "_stop_reports", None) is not None:
            self._stop_reports.set()
        for monitor in (self.trainer_monitor, self.explorer_monitor):
            if monitor is not None:
                monitor.close()
        if self.explorer is not None:
            self.explorer.runner_pool.shutdown()
        for wrapper in (*self.wrappers, *self.auxiliary_wrappers):
            wrapper.close()
        for engine in self.engines:
            close = getattr(engine, "close", None)
            if close:
                close()


def load_actor_weights(actor_dir: Path) -> dict[str, torch.Tensor]:
    from trivium.trainer.trainer import load_causal_lm

    return load_causal_lm(str(actor_dir), trainable=False).state_dict()
