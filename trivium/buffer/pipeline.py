"""Pipelines: ordered operators built from ``[OperatorConfig(name, args)]``.

Owns ``ExperiencePipeline`` (experiences -> experiences + metrics, run by the explorer
before writing; with ``save_input`` it first appends its input to a file, ``pipeline_input.py``),
``TaskPipeline`` (row filters and rewrites applied to a taskset before exploring, then the
order and top-k cut by task priority, ``task_priority.py``), building both from a
``PipelineConfig``, and ``pipeline_problems`` (what a config check refuses in a pipeline). An
operator name is looked up in trivium's registries first, then in Data-Juicer's
(``data_juicer_ops.py``), which read the pipeline's ``target_fields``; a pipeline's
``config_path`` recipe (``data_juicer_recipes.py``) gives its operators instead of
``operators``. Operators themselves live in ``operators.py``; plugins register more by name.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trivium.buffer.operators import EXPERIENCE_OPERATORS, TASK_OPERATORS, PassRateCalculator
from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.registry import Registry, RegistryError


def _name_and_args(config: Any) -> tuple[Any, dict[str, Any]]:
    name = config["name"] if isinstance(config, dict) else getattr(config, "name", None)
    args = (config.get("args") if isinstance(config, dict) else getattr(config, "args", None)) or {}
    return name, dict(args)


def _unknown_name(registry: Registry, name: str, section: str) -> str:
    from trivium.buffer.data_juicer_checks import data_juicer_operators

    trivium_names, juicer_names = registry.names(), list(data_juicer_operators())
    close = difflib.get_close_matches(name, trivium_names, n=3) + difflib.get_close_matches(
        name, juicer_names, n=3
    )
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    listed = (
        f'{len(juicer_names)} known; `python -c "from data_juicer.ops import OPERATORS; '
        f'print(sorted(OPERATORS.modules))"` lists them'
        if juicer_names
        else "py-data-juicer is not installed: `pip install py-data-juicer` adds them"
    )
    return (
        f"{section}: unknown operator '{name}': neither a trivium {registry.kind} "
        f"({', '.join(trivium_names)}) nor a Data-Juicer operator ({listed}).{hint} "
        "A plugin is named 'my_package.module:Name'."
    )


def _build(registry: Registry, config: Any, section: str, target_fields: Sequence[str] = ()) -> Any:
    from trivium.buffer import data_juicer_checks, data_juicer_ops

    name, args = _name_and_args(config)
    on_experiences = registry is EXPERIENCE_OPERATORS
    if name and name not in registry and data_juicer_checks.is_data_juicer_operator(name):
        from trivium.buffer.data_juicer_task_stats import StatsKeepingTaskOperator

        kind = data_juicer_ops.DataJuicerExperienceOperator if on_experiences else StatsKeepingTaskOperator
        try:
            return kind(name, args, list(target_fields))
        except UserError as error:
            raise UserError(f"{section}: {error}") from error
    try:
        cls = registry.get(name)
    except RegistryError as error:
        if name and "." not in name and ":" not in name:
            raise UserError(_unknown_name(registry, name, section)) from error
        raise UserError(f"{section}: {error}") from error
    try:
        return cls(**args)
    except TypeError as error:
        raise UserError(f"{section}: bad args for operator '{name}': {error}") from error


def pipeline_problems(pipeline: Any, pipeline_name: str) -> list[tuple[str, str]]:
    """(key, message) for each operator of ``data_processor.<pipeline_name>`` that cannot run here.

    What a config check refuses: an unknown name (with close names from trivium's and
    Data-Juicer's registries), a Data-Juicer operator that needs a model, a service or a
    missing package at run time, one with bad args or no field to read, and a recipe file's
    operators of the same kinds. A recipe file not found from here is left to the run.
    """
    from trivium.buffer import data_juicer_checks, data_juicer_ops

    registry = EXPERIENCE_OPERATORS if pipeline_name == "experience_pipeline" else TASK_OPERATORS
    problems = _pipeline_key_problems(pipeline, pipeline_name) if pipeline else []
    for index, config in enumerate(pipeline.operators if pipeline else []):
        key = f"data_processor.{pipeline_name}.operators[{index}]"
        name, args = _name_and_args(config)
        if not name:
            problems.append((f"{key}.name", "an operator needs a name"))
        elif name in registry:
            # An operator may declare what a config check finds wrong with its args (trait).
            config_problems = getattr(registry.get(name), "config_problems", None)
            problems += [
                (f"{key}.args", problem) for problem in (config_problems(args) if config_problems else [])
            ]
        elif data_juicer_checks.is_data_juicer_operator(name):
            on_experiences = registry is EXPERIENCE_OPERATORS
            problem = data_juicer_ops.entry_problem(
                name, args, pipeline.target_fields, on_experiences=on_experiences
            )
            if problem:
                problems.append((key, problem))
        elif "." not in name and ":" not in name:
            problems.append((f"{key}.name", _unknown_name(registry, name, key).split(": ", 1)[1]))
    return problems


def pipeline_notes(pipeline: Any, pipeline_name: str) -> list[tuple[str, str]]:
    """(key, note) for each Data-Juicer operator of the pipeline that calls a model through an API."""
    from trivium.buffer import data_juicer_api_models, data_juicer_checks

    if pipeline is None:
        return []
    section = f"data_processor.{pipeline_name}"
    entries = [
        (f"{section}.operators[{index}]", *_name_and_args(config))
        for index, config in enumerate(pipeline.operators)
    ]
    recipes = [(f"{section}.config_path", pipeline.config_path)] if pipeline.config_path else []
    recipes += [
        (key, args["config_path"])
        for key, name, args in entries
        if name == "data_juicer" and "config_path" in args
    ]
    for key, path in recipes:
        if Path(path).is_file():  # read from the directory the run starts in
            from trivium.buffer.data_juicer_recipes import pipeline_recipe

            with contextlib.suppress(UserError):  # a bad recipe is pipeline_problems' to report
                entries += [(key, config["name"], config["args"]) for config in pipeline_recipe(path)[0]]
    notes = []
    for key, name, args in entries:
        trivium_own = name in EXPERIENCE_OPERATORS or name in TASK_OPERATORS
        if name and not trivium_own and data_juicer_checks.is_data_juicer_operator(name):
            note = data_juicer_api_models.api_note(name, args)
            if note:
                notes.append((key, note))
    return notes


def _pipeline_key_problems(pipeline: Any, pipeline_name: str) -> list[tuple[str, str]]:
    """What a config check refuses in the pipeline's own keys (besides its operators)."""
    section = f"data_processor.{pipeline_name}"
    problems = _recipe_problems(pipeline, section, on_experiences=pipeline_name == "experience_pipeline")
    if pipeline_name == "experience_pipeline":
        return problems + _experience_key_problems(pipeline, section)
    return problems + _task_key_problems(pipeline, section)


def _recipe_problems(pipeline: Any, section: str, *, on_experiences: bool) -> list[tuple[str, str]]:
    """``config_path`` set with ``operators``, and what its recipe holds that cannot run here."""
    from trivium.buffer import data_juicer_ops

    if not pipeline.config_path:
        return []
    if pipeline.operators:
        message = (
            "a recipe file gives the pipeline's operators in place of `operators`: set one of the two "
            "(a recipe can also be one operator: {name: data_juicer, args: {config_path: ...}})"
        )
        return [(f"{section}.config_path", message)]
    if not Path(pipeline.config_path).is_file():
        return []  # read from the directory the run starts in
    try:
        configs, fields = _recipe_configs(pipeline)
    except UserError as error:
        return [(f"{section}.config_path", str(error))]
    problems = []
    for config in configs:
        problem = data_juicer_ops.entry_problem(
            config["name"], config["args"], fields, on_experiences=on_experiences
        )
        if problem:
            problems.append((f"{section}.config_path", f"{pipeline.config_path}: {problem}"))
    return problems


def _experience_key_problems(pipeline: Any, section: str) -> list[tuple[str, str]]:
    from trivium.buffer.pipeline_input import input_save_path_problem

    problems = [
        (f"{section}.{key}", "task priorities order a taskset: set it in data_processor.task_pipeline")
        for key, unset in (("priority_weights", {}), ("top_k", -1))
        if getattr(pipeline, key) != unset
    ]
    if pipeline.input_save_path and not pipeline.save_input:
        problems.append((f"{section}.input_save_path", "it is written only with save_input: true"))
    problem = input_save_path_problem(pipeline.input_save_path)
    if problem:
        problems.append((f"{section}.input_save_path", problem))
    return problems


def _task_key_problems(pipeline: Any, section: str) -> list[tuple[str, str]]:
    from trivium.buffer.task_priority import priority_problems

    elsewhere = (
        "the task pipeline reads a taskset, which stays where it is; keeping a copy of the input is "
        "for data_processor.experience_pipeline"
    )
    problems = [
        (f"{section}.{key}", elsewhere) for key in ("save_input", "input_save_path") if getattr(pipeline, key)
    ]
    problems += [
        (f"{section}.{key}", message)
        for key, message in priority_problems(pipeline.priority_weights, pipeline.top_k)
    ]
    if (pipeline.priority_weights or pipeline.top_k != -1) and not (
        pipeline.operators or pipeline.config_path
    ):
        message = (
            "task priorities are made of the stats the pipeline's Data-Juicer operators compute: add "
            "one (e.g. alphanumeric_filter) to operators or config_path"
        )
        problems.append((f"{section}.priority_weights", message))
    return problems


def _recipe_configs(pipeline: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """(operator configs, fields they read) of the pipeline's ``config_path`` recipe."""
    from trivium.buffer.data_juicer_recipes import pipeline_recipe

    configs, fields = pipeline_recipe(pipeline.config_path)
    return configs, fields or list(pipeline.target_fields)


def _operator_configs(pipeline: Any) -> tuple[list[Any], list[str]]:
    """(operator configs, target fields) the pipeline runs: its recipe's, or its ``operators``."""
    if not pipeline.config_path:
        return list(pipeline.operators), list(pipeline.target_fields)
    return _recipe_configs(pipeline)  # setting operators too is refused by _pipeline_key_problems


def pipeline_has_work(pipeline: Any) -> bool:
    """The pipeline has operators to run (its own or a recipe's), or input to keep."""
    return pipeline is not None and bool(
        pipeline.operators or pipeline.config_path or getattr(pipeline, "save_input", False)
    )


class ExperiencePipeline:
    def __init__(self, operators: list[Any], input_writer: Any = None):
        self.operators = operators
        self.input_writer = input_writer  # keeps every experience entering (save_input)

    @classmethod
    def from_configs(cls, configs: Sequence[Any], target_fields: Sequence[str] = ()) -> ExperiencePipeline:
        section = "data_processor.experience_pipeline.operators"
        return cls([_build(EXPERIENCE_OPERATORS, config, section, target_fields) for config in configs])

    @classmethod
    def from_pipeline_config(cls, pipeline: Any, run_dir: str | Path) -> ExperiencePipeline:
        """The pipeline of ``data_processor.experience_pipeline``; its input kept under ``run_dir`` by default."""
        from trivium.buffer.pipeline_input import DEFAULT_FILE, PipelineInputWriter, input_save_path_problem

        problems = _pipeline_key_problems(pipeline, "experience_pipeline")
        if problems:
            raise UserError(f"{problems[0][0]}: {problems[0][1]}")
        configs, fields = _operator_configs(pipeline)
        built = cls.from_configs(configs, target_fields=fields)
        if pipeline.save_input:
            problem = input_save_path_problem(pipeline.input_save_path)
            if problem:
                raise UserError(f"data_processor.experience_pipeline.input_save_path: {problem}")
            built.input_writer = PipelineInputWriter(pipeline.input_save_path or Path(run_dir) / DEFAULT_FILE)
        return built

    def connect_pass_rate(self, listener: Callable[[str, float], None]) -> None:
        """Send every group's pass rate to ``listener`` (e.g. ``reader.update_pass_rate``)."""
        for operator in self.operators:
            if isinstance(operator, PassRateCalculator):
                operator.listeners.append(listener)

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if self.input_writer is not None:
            self.input_writer.write(experiences)  # before any operator drops or changes one
        metrics: dict[str, float] = {}
        for operator in self.operators:
            name = getattr(operator, "name", type(operator).__name__)
            experiences, operator_metrics = operator.process(experiences)
            metrics.update({f"{name}/{key}": value for key, value in operator_metrics.items()})
        metrics["experience_count"] = float(len(experiences))
        return experiences, metrics


class TaskPipeline:
    def __init__(
        self, operators: list[Any], priority_weights: dict[str, float] | None = None, top_k: int = -1
    ):
        self.operators = operators
        # Rows are ordered by priority and cut to top_k when either is set.
        self.priority_weights = dict(priority_weights or {})
        self.top_k = top_k

    @classmethod
    def from_configs(cls, configs: Sequence[Any], target_fields: Sequence[str] = ()) -> TaskPipeline:
        section = "data_processor.task_pipeline.operators"
        return cls([_build(TASK_OPERATORS, config, section, target_fields) for config in configs])

    @classmethod
    def from_pipeline_config(cls, pipeline: Any) -> TaskPipeline:
        """The pipeline of ``data_processor.task_pipeline``: operators or recipe, then priorities."""
        problems = _pipeline_key_problems(pipeline, "task_pipeline")
        if problems:
            raise UserError(f"{problems[0][0]}: {problems[0][1]}")
        configs, fields = _operator_configs(pipeline)
        built = cls.from_configs(configs, target_fields=fields)
        built.priority_weights, built.top_k = dict(pipeline.priority_weights or {}), int(pipeline.top_k)
        return built

    @property
    def orders_by_priority(self) -> bool:
        return bool(self.priority_weights) or self.top_k != -1

    def filter_rows(self, rows: Any, row_numbers: list[int]) -> tuple[list[int], dict[str, float]]:
        """The row numbers every operator keeps, and how many each operator dropped.

        Rows an operator rewrites (a batch operator with ``process_rows``) are written back
        into ``rows`` when it is a list, and otherwise kept in ``self.rewritten_rows``.
        """
        metrics: dict[str, float] = {}
        self.rewritten_rows: dict[int, dict[str, Any]] = {}
        for operator in self.operators:
            before = len(row_numbers)
            current = {n: self.rewritten_rows.get(n, rows[n]) for n in row_numbers}
            if hasattr(operator, "process_rows"):  # sees all rows at once; may rewrite them
                row_numbers, rewritten = operator.process_rows(current)
                self.rewritten_rows.update(rewritten)
            else:
                row_numbers = [n for n in row_numbers if operator.keep(current[n])]
            name = getattr(operator, "name", type(operator).__name__)
            metrics[f"{name}/dropped"] = float(before - len(row_numbers))
        if self.orders_by_priority:
            row_numbers = self._by_priority(rows, row_numbers, metrics)
        if isinstance(rows, list):
            for number, row in self.rewritten_rows.items():
                rows[number] = row
        return row_numbers, metrics

    def _by_priority(self, rows: Any, row_numbers: list[int], metrics: dict[str, float]) -> list[int]:
        """``row_numbers`` ordered by task priority and cut to ``top_k`` (``task_priority.py``)."""
        from trivium.buffer.task_priority import order_by_priority, row_stats

        stats_by_row = {n: row_stats(self.rewritten_rows.get(n, rows[n])) for n in row_numbers}
        for operator in self.operators:  # stats the pipeline's Data-Juicer operators computed
            for number, stats in getattr(operator, "stats_by_row", {}).items():
                if number in stats_by_row:
                    stats_by_row[number].update(stats)
        self.priorities: dict[int, float]
        ordered, self.priorities = order_by_priority(
            row_numbers, stats_by_row, self.priority_weights, self.top_k
        )
        metrics["priority/dropped"] = float(len(row_numbers) - len(ordered))
        return ordered

    def rows_after(self, rows: Any) -> Any:
        """``rows`` with the rewrites of the last ``filter_rows`` (the same object when none)."""
        rewritten = getattr(self, "rewritten_rows", {})
        if not rewritten or isinstance(rows, list):
            return rows
        return [rewritten.get(n, row) for n, row in enumerate(rows)]
