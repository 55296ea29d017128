"""Pipelines: ordered operators built from ``[OperatorConfig(name, args)]``.

Owns ``ExperiencePipeline`` (experiences -> experiences + metrics, run by the explorer
before writing), ``TaskPipeline`` (row filters and rewrites applied to a taskset before
exploring), and ``pipeline_problems`` (what a config check refuses in a pipeline). An
operator name is looked up in trivium's registries first, then in Data-Juicer's
(``data_juicer_ops.py``), which read the pipeline's ``target_fields``. Operators themselves
live in ``operators.py``; plugins register more by name.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Sequence

from trivium.buffer.operators import EXPERIENCE_OPERATORS, TASK_OPERATORS, PassRateCalculator
from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.registry import Registry, RegistryError


def _name_and_args(config: Any) -> tuple[Any, dict[str, Any]]:
    name = config["name"] if isinstance(config, dict) else getattr(config, "name", None)
    args = (config.get("args") if isinstance(config, dict) else getattr(config, "args", None)) or {}
    return name, dict(args)


def _unknown_name(registry: Registry, name: str, section: str) -> str:
    from trivium.buffer.data_juicer_ops import data_juicer_operators

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
    from trivium.buffer import data_juicer_ops

    name, args = _name_and_args(config)
    on_experiences = registry is EXPERIENCE_OPERATORS
    if name and name not in registry and data_juicer_ops.is_data_juicer_operator(name):
        kind = (
            data_juicer_ops.DataJuicerExperienceOperator
            if on_experiences
            else data_juicer_ops.DataJuicerTaskOperator
        )
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
    from trivium.buffer import data_juicer_ops

    registry = EXPERIENCE_OPERATORS if pipeline_name == "experience_pipeline" else TASK_OPERATORS
    problems = []
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
        elif data_juicer_ops.is_data_juicer_operator(name):
            on_experiences = registry is EXPERIENCE_OPERATORS
            problem = data_juicer_ops.entry_problem(
                name, args, pipeline.target_fields, on_experiences=on_experiences
            )
            if problem:
                problems.append((key, problem))
        elif "." not in name and ":" not in name:
            problems.append((f"{key}.name", _unknown_name(registry, name, key).split(": ", 1)[1]))
    return problems


class ExperiencePipeline:
    def __init__(self, operators: list[Any]):
        self.operators = operators

    @classmethod
    def from_configs(cls, configs: Sequence[Any], target_fields: Sequence[str] = ()) -> ExperiencePipeline:
        section = "data_processor.experience_pipeline.operators"
        return cls([_build(EXPERIENCE_OPERATORS, config, section, target_fields) for config in configs])

    def connect_pass_rate(self, listener: Callable[[str, float], None]) -> None:
        """Send every group's pass rate to ``listener`` (e.g. ``reader.update_pass_rate``)."""
        for operator in self.operators:
            if isinstance(operator, PassRateCalculator):
                operator.listeners.append(listener)

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        metrics: dict[str, float] = {}
        for operator in self.operators:
            name = getattr(operator, "name", type(operator).__name__)
            experiences, operator_metrics = operator.process(experiences)
            metrics.update({f"{name}/{key}": value for key, value in operator_metrics.items()})
        metrics["experience_count"] = float(len(experiences))
        return experiences, metrics


class TaskPipeline:
    def __init__(self, operators: list[Any]):
        self.operators = operators

    @classmethod
    def from_configs(cls, configs: Sequence[Any], target_fields: Sequence[str] = ()) -> TaskPipeline:
        section = "data_processor.task_pipeline.operators"
        return cls([_build(TASK_OPERATORS, config, section, target_fields) for config in configs])

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
        if isinstance(rows, list):
            for number, row in self.rewritten_rows.items():
                rows[number] = row
        return row_numbers, metrics

    def rows_after(self, rows: Any) -> Any:
        """``rows`` with the rewrites of the last ``filter_rows`` (the same object when none)."""
        rewritten = getattr(self, "rewritten_rows", {})
        if not rewritten or isinstance(rows, list):
            return rows
        return [rewritten.get(n, row) for n, row in enumerate(rows)]
