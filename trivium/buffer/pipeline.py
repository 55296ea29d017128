"""Pipelines: ordered operators built from ``[OperatorConfig(name, args)]``.

Owns ``ExperiencePipeline`` (experiences -> experiences + metrics, run by the explorer
before writing) and ``TaskPipeline`` (row filters applied to a taskset before training).
Operators themselves live in ``operators.py``; plugins register more by name.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from trivium.buffer.operators import EXPERIENCE_OPERATORS, TASK_OPERATORS, PassRateCalculator
from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.registry import Registry, RegistryError


def _build(registry: Registry, config: Any, section: str) -> Any:
    name = config["name"] if isinstance(config, dict) else getattr(config, "name", None)
    args = (config.get("args") if isinstance(config, dict) else getattr(config, "args", None)) or {}
    try:
        cls = registry.get(name)
    except RegistryError as error:
        raise UserError(f"{section}: {error}") from error
    try:
        return cls(**args)
    except TypeError as error:
        raise UserError(f"{section}: bad args for operator '{name}': {error}") from error


class ExperiencePipeline:
    def __init__(self, operators: list[Any]):
        self.operators = operators

    @classmethod
    def from_configs(cls, configs: Sequence[Any]) -> ExperiencePipeline:
        section = "data_processor.experience_pipeline.operators"
        return cls([_build(EXPERIENCE_OPERATORS, config, section) for config in configs])

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
    def from_configs(cls, configs: Sequence[Any]) -> TaskPipeline:
        section = "data_processor.task_pipeline.operators"
        return cls([_build(TASK_OPERATORS, config, section) for config in configs])

    def filter_rows(self, rows: Any, row_numbers: list[int]) -> tuple[list[int], dict[str, float]]:
        """The row numbers every operator keeps, and how many each operator dropped."""
        metrics = {}
        for operator in self.operators:
            before = len(row_numbers)
            row_numbers = [n for n in row_numbers if operator.keep(rows[n])]
            metrics[f"{type(operator).__name__}/dropped"] = float(before - len(row_numbers))
        return row_numbers, metrics
