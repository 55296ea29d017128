"""Turn a veRL ``main_ppo`` command's overrides into a trivium config (a nested dict).

Every override ends up in the report exactly once: mapped to trivium keys, passed through
to ``trainer.trainer_config`` unchanged, or ignored with the reason. Values derived from
several keys (batch sizes, sync interval, GPU split) carry the arithmetic in their comment.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from trivium.config.dotted_paths import set_path
from trivium.errors import UserError
from trivium.interop import verl_tables as tables
from trivium.interop.gpu_allocation import split_gpus
from trivium.interop.shell_script import ExtractedCommand, extract_from_arguments, extract_from_script
from trivium.interop.verl_values import Override, parse_overrides

MAPPED, PASSED, IGNORED = "mapped", "passed through", "ignored"


@dataclass
class ReportLine:
    source: str
    written: str
    action: str  # MAPPED, PASSED or IGNORED
    detail: str  # the trivium keys, or the reason


@dataclass
class Conversion:
    config: dict
    comments: dict[str, str]  # trivium dotted path -> comment for the YAML line
    report: list[ReportLine]
    notes: list[str] = field(default_factory=list)


class _Converter:
    def __init__(self, overrides: list[Override]):
        self.values = {override.key: override.value for override in overrides}
        self.written = {override.key: override.written for override in overrides}
        self.pending = [override.key for override in overrides]  # keys not yet reported
        self.config: dict = {}
        self.comments: dict[str, str] = {}
        self.report: list[ReportLine] = []
        self.notes: list[str] = []

    # -- bookkeeping -------------------------------------------------------------------
    def value(self, key: str) -> Any:
        return self.values.get(key, tables.VERL_DEFAULTS.get(key))

    def given(self, key: str) -> bool:
        return key in self.values

    def source_text(self, key: str) -> str:
        """``key=value`` as written, or ``key (veRL default: value)``."""
        if self.given(key):
            return f"{key}={self.written[key]}"
        return f"{key} (veRL default: {tables.VERL_DEFAULTS[key]})"

    def positive_integer(self, key: str) -> int:
        number = self.value(key)
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise UserError(f"{key} must be a positive integer, got {number!r}")
        return number

    def put(self, target: str, value: Any, comment: str | None = None) -> None:
        set_path(self.config, target, value)
        if comment:
            self.comments[target] = comment

    def mark(self, key: str, action: str, detail: str) -> None:
        if key in self.pending:
            self.pending.remove(key)
            self.report.append(ReportLine(key, self.written[key], action, detail))

    def map_direct(self, key: str, target: str, value: Any = None) -> None:
        self.put(target, self.values[key] if value is None else value, self.source_text(key))
        self.mark(key, MAPPED, target)

    # -- sections ----------------------------------------------------------------------
    def convert(self) -> Conversion:
        self.algorithm()
        self.batch_sizes()
        self.data_files()
        self.trainer_globals()
        self.placement()
        self.remaining_keys()
        return Conversion(_ordered(self.config), self.comments, self.report, self.notes)

    def algorithm(self) -> None:
        key = "algorithm.adv_estimator"
        estimator = self.values.get(key, "gae")
        if estimator not in tables.ADVANTAGE_ESTIMATORS:
            known = ", ".join(tables.ADVANTAGE_ESTIMATORS)
            raise UserError(f"{key}={estimator} has no trivium equivalent; supported: {known}")
        algorithm_type, advantage_fn = tables.ADVANTAGE_ESTIMATORS[estimator]
        comment = f"{key}={estimator}" if self.given(key) else f"{key} (veRL default: gae)"
        self.put("algorithm.algorithm_type", algorithm_type)
        self.put("algorithm.advantage_fn", advantage_fn, comment)
        self.mark(key, MAPPED, "algorithm.algorithm_type, algorithm.advantage_fn")
        self.kl_in_reward()
        self.kl_loss()

    def kl_in_reward(self) -> None:
        switch, kind = "algorithm.use_kl_in_reward", "algorithm.kl_penalty"
        if self.values.get(switch, False):
            name = self.value(kind)
            self.put("algorithm.kl_penalty_fn", tables.KL_NAMES.get(name, name), self.source_text(kind))
            self.mark(switch, MAPPED, "algorithm.kl_penalty_fn")
            self.mark(kind, MAPPED, "algorithm.kl_penalty_fn")
            self.kl_controller()
            return
        # veRL's default is off; trivium presets may turn it on, so say "none" explicitly.
        comment = f"{switch}=False" if self.given(switch) else f"{switch} (veRL default: False)"
        self.put("algorithm.kl_penalty_fn", "none", comment)
        self.mark(switch, MAPPED, "algorithm.kl_penalty_fn")
        self.mark(kind, IGNORED, f"only read when {switch}=True")
        for key in tables.KL_CONTROLLER_KEYS:
            if self.given(key):
                self.mark(key, IGNORED, f"only read when {switch}=True")

    def kl_controller(self) -> None:
        """veRL's ``kl_ctrl``: a fixed coefficient, or the adaptive controller with its target and horizon."""
        key = "algorithm.kl_ctrl.type"
        kind = self.value(key)
        if kind not in ("fixed", "adaptive"):
            raise UserError(f"{key}={kind} has no trivium equivalent; supported: fixed, adaptive")
        adaptive = kind == "adaptive"
        self.put("algorithm.kl_penalty_fn_args.adaptive", adaptive, self.source_text(key))
        self.mark(key, MAPPED, "algorithm.kl_penalty_fn_args.adaptive")
        for name in ("target_kl", "horizon"):
            source = f"algorithm.kl_ctrl.{name}"
            if adaptive:
                self.map_direct(source, f"algorithm.kl_penalty_fn_args.{name}", self.value(source))
            elif self.given(source):
                self.mark(source, IGNORED, f"only read when {key}=adaptive")

    def kl_loss(self) -> None:
        prefix = "actor_rollout_ref.actor."
        switch, kind, coef = prefix + "use_kl_loss", prefix + "kl_loss_type", prefix + "kl_loss_coef"
        if self.values.get(switch, False):
            name = self.value(kind)
            self.put("algorithm.kl_loss_fn", tables.KL_NAMES.get(name, name), self.source_text(kind))
            self.mark(switch, MAPPED, "algorithm.kl_loss_fn")
            self.mark(kind, MAPPED, "algorithm.kl_loss_fn")
            if self.given(coef):
                self.map_direct(coef, "algorithm.kl_loss_fn_args.kl_coef")
            return
        comment = f"{switch}=False" if self.given(switch) else f"{switch} (veRL default: False)"
        self.put("algorithm.kl_loss_fn", "none", comment)
        self.mark(switch, MAPPED, "algorithm.kl_loss_fn")
        for key in (kind, coef):
            self.mark(key, IGNORED, f"only read when {switch}=True")

    def batch_sizes(self) -> None:
        train_key = "data.train_batch_size"
        mini_key = "actor_rollout_ref.actor.ppo_mini_batch_size"
        n_key = "actor_rollout_ref.rollout.n"
        train, mini, n = self.value(train_key), self.value(mini_key), self.value(n_key)
        for key in (train_key, mini_key, n_key):
            self.positive_integer(key)
        if train % mini:
            raise UserError(
                f"{train_key}={train} is not a multiple of {mini_key}={mini}; "
                "veRL needs whole mini-batches per step, and so does the sync interval"
            )
        self.put("algorithm.repeat_times", n, self.source_text(n_key))
        self.put("buffer.batch_size", mini, self.source_text(mini_key))
        self.put("buffer.train_batch_size", mini * n, f"{mini_key} * {n_key} = {mini} * {n}")
        self.put("synchronizer.sync_interval", train // mini, f"{train_key} / {mini_key} = {train} / {mini}")
        for key, setting in tables.SYNCHRONIZER.items():
            self.put(f"synchronizer.{key}", setting)
        self.mark(train_key, MAPPED, "synchronizer.sync_interval")
        self.mark(mini_key, MAPPED, "buffer.batch_size, buffer.train_batch_size, synchronizer.sync_interval")
        self.mark(n_key, MAPPED, "algorithm.repeat_times, buffer.train_batch_size")
        self.note_step_units(train // mini)

    def note_step_units(self, steps_per_verl_step: int) -> None:
        """veRL counts these in its own steps; one of them is several trivium steps."""
        counted = [key for key in tables.COUNTED_IN_VERL_STEPS if self.given(key)]
        if steps_per_verl_step > 1 and counted:
            self.notes.append(
                f"{', '.join(counted)} count veRL steps, and one veRL step is {steps_per_verl_step} trivium "
                f"steps (synchronizer.sync_interval); the values are copied unchanged, so multiply them "
                f"(x {steps_per_verl_step}) to keep veRL's schedule"
            )

    def data_files(self) -> None:
        prompt_key = self.value("data.prompt_key")
        response_key = self.values.get("data.response_key", "answer")
        shuffle = self.values.get("data.shuffle")
        for key in ("data.prompt_key", "data.response_key"):
            self.mark(key, MAPPED, "format of every taskset")
        train = self._tasksets("data.train_files", "", prompt_key, response_key)
        if shuffle is not None:
            for taskset in train:
                taskset["task_selector"] = {"selector_type": "shuffle" if shuffle else "sequential"}
            self.mark("data.shuffle", MAPPED, "task_selector.selector_type of every training taskset")
        if train:
            self.put("buffer.explorer_input.tasksets", train)
        evaluation = self._tasksets("data.val_files", "_eval", prompt_key, response_key)
        self._eval_settings(evaluation)
        if evaluation:
            self.put("buffer.explorer_input.eval_tasksets", evaluation)

    def _tasksets(self, key: str, suffix: str, prompt_key: str, response_key: str) -> list[dict]:
        if not self.given(key):
            return []
        files = self.values[key]
        files = files if isinstance(files, list) else [files]
        tasksets, names = [], set()
        for index, file in enumerate(files):
            directory, stem = _directory_and_split(str(file))
            name = (posixpath.basename(directory.rstrip("/")) or stem) + suffix
            if name in names:
                name = f"{name}_{stem}"
            names.add(name)
            split = stem.split(".")[0]
            if split not in tables.KNOWN_SPLITS:
                self.notes.append(
                    f"{file}: split '{split}' is not a standard split name; check that the taskset "
                    f"'{name}' can load it (rename the file to train/test or set its split)"
                )
            taskset = {
                "name": name,
                "storage_type": "file",
                "path": directory,
                "split": split,
                "format": {"prompt_key": prompt_key, "response_key": response_key},
            }
            section = "eval_tasksets" if suffix else "tasksets"
            base = f"buffer.explorer_input.{section}.{index}"
            self.comments[f"{base}.path"] = f"{key}: {file}"
            self.comments[f"{base}.format"] = "check these column names against the dataset"
            tasksets.append(taskset)
        self.mark(key, MAPPED, f"buffer.explorer_input.{'eval_tasksets' if suffix else 'tasksets'}")
        return tasksets

    def _eval_settings(self, evaluation: list[dict]) -> None:
        prefix = "actor_rollout_ref.rollout.val_kwargs."
        for key in [k for k in self.pending if k.startswith(prefix)]:
            if not evaluation:
                self.mark(key, IGNORED, "there is no data.val_files to evaluate on")
                continue
            setting, value = key[len(prefix) :], self.values[key]
            if setting == "n":
                for taskset in evaluation:
                    taskset["repeat_times"] = value
                self.mark(key, MAPPED, "repeat_times of every eval taskset")
            elif setting == "do_sample":
                if not value:  # greedy decoding
                    for taskset in evaluation:
                        taskset.setdefault("rollout_args", {})["temperature"] = 0.0
                self.mark(key, MAPPED, "rollout_args.temperature of every eval taskset (0 = greedy)")
            else:
                for taskset in evaluation:
                    taskset.setdefault("rollout_args", {})[setting] = value
                self.mark(key, MAPPED, f"rollout_args.{setting} of every eval taskset")

    def trainer_globals(self) -> None:
        logger_key = "trainer.logger"
        if self.given(logger_key):
            loggers = self.values[logger_key]
            loggers = loggers if isinstance(loggers, list) else [loggers]
            usable = [name for name in loggers if name in tables.MONITORS]
            dropped = [name for name in loggers if name != "console" and name not in usable[:1]]
            self.put("monitor.monitor_type", usable[0] if usable else "none", self.source_text(logger_key))
            detail = "monitor.monitor_type (console output is always on)"
            if dropped:
                detail += (
                    f"; one monitor is written ({', '.join(tables.MONITORS)}), dropped: {', '.join(dropped)}"
                )
            self.mark(logger_key, MAPPED, detail)
        self.checkpoint_dir()
        steps_key = "trainer.total_training_steps"
        if self.given(steps_key):
            if self.values[steps_key] is None:
                self.mark(steps_key, IGNORED, "null means: run for trainer.total_epochs")
            else:
                for target in ("buffer.total_steps", "trainer.total_steps"):
                    self.put(target, self.values[steps_key], self.source_text(steps_key))
                self.mark(steps_key, MAPPED, "buffer.total_steps, trainer.total_steps")
        resume_key = "trainer.resume_mode"
        if self.given(resume_key):
            mode = self.values[resume_key]
            if mode not in tables.RESUME_MODES:
                raise UserError(
                    f"{resume_key}={mode} is unknown; veRL accepts {', '.join(tables.RESUME_MODES)}"
                )
            self.map_direct(resume_key, "continue_from_checkpoint", tables.RESUME_MODES[mode])

    def checkpoint_dir(self) -> None:
        key = "trainer.default_local_dir"
        if not self.given(key):
            self.put("checkpoint_root_dir", "./checkpoints")
            return
        directory = str(self.values[key]).rstrip("/")
        # veRL's value is the run's own directory; trivium appends <project>/<name> itself.
        tail = f"/{self.values.get('trainer.project_name')}/{self.values.get('trainer.experiment_name')}"
        if directory.endswith(tail):
            directory = directory[: -len(tail)] or "."
        else:
            self.notes.append(f"checkpoints will go to {directory}/<project>/<name>/, one level below {key}")
        self.map_direct(key, "checkpoint_root_dir", directory)

    def placement(self) -> None:
        nodes, per_node = (
            self.positive_integer("trainer.nnodes"),
            self.positive_integer("trainer.n_gpus_per_node"),
        )
        for key in ("trainer.nnodes", "trainer.n_gpus_per_node"):
            comment = self.source_text(key)
            self.put(tables.DIRECT[key], self.value(key), comment)
            self.mark(key, MAPPED, tables.DIRECT[key])
        tp_key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
        rollout_tp = self.positive_integer(tp_key)
        self.put("explorer.rollout_model.tensor_parallel_size", rollout_tp, self.source_text(tp_key))
        self.mark(tp_key, MAPPED, "explorer.rollout_model.tensor_parallel_size")
        reward_model = self.reward_model()
        total = nodes * per_node
        if total == 1 and reward_model is None:
            # One GPU: trainer and explorer take turns on it.
            self.put("mode", "colocate", "a single GPU is shared by explorer and trainer")
            self.put("explorer.rollout_model.engine_num", 1)
            return
        split = split_gpus(total, rollout_tp, (1,) if reward_model else ())
        self.put(
            "explorer.rollout_model.engine_num",
            split.rollout_engines,
            f"{split.rollout_engines * rollout_tp} of {total} GPUs; the trainer keeps {split.trainer_gpus}",
        )
        if reward_model is not None:
            reward_model["engine_num"] = split.auxiliary_engines[0]
            reward_model["tensor_parallel_size"] = 1
            self.put("explorer.auxiliary_models", [reward_model], "reward_model")

    def reward_model(self) -> dict | None:
        keys = [key for key in self.pending if key.startswith("reward_model.")]
        if not self.values.get("reward_model.enable", False):
            for key in keys:
                self.mark(key, IGNORED, "reward_model.enable is not True")
            return None
        path_key = "reward_model.model.path"
        if not self.given(path_key):
            raise UserError("reward_model.enable=True needs reward_model.model.path")
        self.mark("reward_model.enable", MAPPED, "explorer.auxiliary_models")
        self.mark(path_key, MAPPED, "explorer.auxiliary_models[0].model_path")
        self.notes.append(
            "the reward model becomes explorer.auxiliary_models[0]: choose a workflow or reward function "
            "that scores responses with it"
        )
        return {"model_path": self.values[path_key]}

    def remaining_keys(self) -> None:
        for key in list(self.pending):
            if key in tables.DIRECT:
                self.map_direct(key, tables.DIRECT[key])
            elif key.startswith(tables.OPTIMIZER_PREFIX) and key not in tables.IGNORED:
                setting = key[len(tables.OPTIMIZER_PREFIX) :]
                setting = tables.OPTIMIZER_RENAMES.get(setting, setting)
                self.map_direct(key, f"algorithm.optimizer.{setting}")
            elif key in tables.IGNORED:
                self.mark(key, IGNORED, tables.IGNORED[key])
            elif key.startswith(tables.ROLLOUT_PASSED_THROUGH) or (
                key.startswith(tables.PASSED_THROUGH_SECTIONS)
                and not key.startswith("actor_rollout_ref.rollout.")
            ):
                target = f"trainer.trainer_config.{key}"
                self.put(target, self.values[key], self.source_text(key))
                if key in tables.ALSO_MAPPED:
                    self.put(tables.ALSO_MAPPED[key], self.values[key], self.source_text(key))
                    target += f" and {tables.ALSO_MAPPED[key]}"
                self.mark(key, PASSED, target)
            else:
                reason = next(
                    (why for prefix, why in tables.SECTION_REASONS.items() if key.startswith(prefix)),
                    "not a veRL setting trivium knows",
                )
                self.mark(key, IGNORED, reason)


def _directory_and_split(file: str) -> tuple[str, str]:
    directory, filename = posixpath.split(file)
    return directory or ".", filename.rsplit(".", 1)[0] if "." in filename else filename


def _ordered(config: dict) -> dict:
    """Top-level sections in the order people expect to read them."""
    ordered = {key: config[key] for key in tables.SECTION_ORDER if key in config}
    ordered.update({key: value for key, value in config.items() if key not in ordered})
    return ordered


def convert_overrides(overrides: list[Override]) -> Conversion:
    """The trivium config for a veRL run with these overrides (on top of veRL's defaults)."""
    return _Converter(overrides).convert()


def _finish(extracted: ExtractedCommand) -> Conversion:
    overrides, notes = parse_overrides(extracted.arguments)
    conversion = convert_overrides(overrides)
    for option in extracted.ignored_options:
        conversion.report.append(
            ReportLine(
                option,
                "",
                IGNORED,
                "selects another veRL base config; the conversion assumes veRL's "
                "default ppo_trainer config, so check keys that config changes",
            )
        )
    conversion.notes = extracted.notes + notes + conversion.notes
    return conversion


def convert_script(script: str, source_name: str = "the script") -> Conversion:
    """Convert the ``main_ppo`` command found in a shell script's text."""
    return _finish(extract_from_script(script, source_name))


def convert_arguments(words: list[str]) -> Conversion:
    """Convert ``key=value`` words (optionally preceded by ``python3 -m verl.trainer.main_ppo``)."""
    if not words:
        raise UserError("no veRL arguments given; pass them after '--', or use --script FILE")
    return _finish(extract_from_arguments(words))


def format_report(conversion: Conversion) -> str:
    """What happened to each veRL key, grouped by outcome, then the notes."""
    lines = []
    for action in (MAPPED, PASSED, IGNORED):
        group = [line for line in conversion.report if line.action == action]
        if not group:
            continue
        lines.append(f"{action} ({len(group)}):")
        width = max(len(line.source) for line in group)
        for line in group:
            lines.append(f"  {line.source.ljust(width)}  ->  {line.detail}")
    if conversion.notes:
        lines.append("notes:")
        lines.extend(f"  - {note}" for note in conversion.notes)
    return "\n".join(lines) + "\n"
