"""Data-Juicer recipe files: the ``data_juicer`` experience operator, and a pipeline's ``config_path``.

A recipe (``config_path``) lists operators as ``- op_name: {args}`` under ``process``, with
the text field they read (``text_keys``) and their worker processes (``np``). Each operator
is checked and built as a named one is (``data_juicer_ops.py``) and runs over the experiences;
``pipeline_recipe`` gives a pipeline-level recipe's operators, which replace the pipeline's
``operators`` (task rows or experiences).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trivium.buffer.data_juicer_checks import (
    data_juicer_installed,
    data_juicer_operators,
    operator_problem,
    refusal_message,
)
from trivium.buffer.data_juicer_ops import (
    EXPERIENCE_FIELDS,
    build_operator,
    check_experience_fields,
    experience_sample,
    kept_experiences,
    run_operators,
)
from trivium.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperator
from trivium.errors import UserError

# Recipe keys besides ``process``: a label, the default text field, the worker processes.
_RECIPE_KEYS = {"project_name", "text_keys", "np", "process"}


def read_recipe(config_path: str) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """(operators as (name, args), the args every operator gets unless it sets them) of a recipe file.

    The defaults are the recipe's text field (``text_keys``) and worker processes (``np``).
    """
    path = Path(config_path)
    if not path.is_file():
        raise UserError(
            f"Data-Juicer recipe '{config_path}' not found (config_path is read from the directory "
            f"the run starts in, {Path.cwd()})"
        )
    recipe = yaml.safe_load(path.read_text()) or {}
    if not isinstance(recipe, dict) or not isinstance(recipe.get("process"), list):
        raise UserError(f"Data-Juicer recipe '{config_path}' needs a `process:` list of operators")
    unknown = sorted(set(recipe) - _RECIPE_KEYS)
    if unknown:
        raise UserError(
            f"Data-Juicer recipe '{config_path}': keys {unknown} have no meaning in a trivium pipeline "
            f"(it reads {sorted(_RECIPE_KEYS)}); remove them"
        )
    text_keys = recipe.get("text_keys") or "text"
    text_key = text_keys[0] if isinstance(text_keys, list) else str(text_keys)
    operators = []
    for entry in recipe["process"]:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise UserError(
                f"Data-Juicer recipe '{config_path}': each process entry is `- op_name: {{args}}`"
            )
        ((name, args),) = entry.items()
        operators.append((str(name), dict(args or {})))
    defaults = {"text_key": text_key, **({"num_proc": int(recipe["np"])} if recipe.get("np") else {})}
    return operators, defaults


def pipeline_recipe(config_path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A pipeline-level recipe: (operator configs ``{name, args}``, the fields its ``text_keys`` names).

    Each operator's args carry the recipe's ``np``; the fields are empty when the recipe names
    none, and the pipeline's ``target_fields`` apply.
    """
    operators, defaults = read_recipe(config_path)
    text_keys = (yaml.safe_load(Path(config_path).read_text()) or {}).get("text_keys")
    fields = (
        [] if not text_keys else [str(k) for k in (text_keys if isinstance(text_keys, list) else [text_keys])]
    )
    common = {k: v for k, v in defaults.items() if k != "text_key"}
    known = data_juicer_operators()
    for name, _ in operators:
        if name not in known:
            raise UserError(f"unknown Data-Juicer operator '{name}' in {config_path}")
    return [{"name": name, "args": {**common, **args}} for name, args in operators], fields


def recipe_problems(config_path: str) -> list[str]:
    """Why the operators of the recipe cannot run on experiences here (empty when they can)."""
    operators, defaults = read_recipe(config_path)
    known = data_juicer_operators()
    problems = []
    for name, args in operators:
        args = {**defaults, **args}
        if name not in known:
            problems.append(f"unknown Data-Juicer operator '{name}' in {config_path}")
        elif args["text_key"] not in EXPERIENCE_FIELDS:
            problems.append(
                f"{config_path}: '{name}' reads '{args['text_key']}'; an experience gives {EXPERIENCE_FIELDS}"
            )
        else:
            problem = operator_problem(name, args, on_experiences=True)
            if problem:
                problems.append(f"{config_path}: {refusal_message(name, problem)}")
    return problems


def recipe_file_problems(config_path: str) -> list[str]:
    """``recipe_problems`` of a recipe file found from here; none for a file that is not (the run reads it)."""
    if not Path(config_path).is_file():
        return []
    try:
        return recipe_problems(config_path)
    except UserError as error:
        return [str(error)]


@EXPERIENCE_OPERATORS.register("data_juicer")
class DataJuicerRecipeOperator(ExperienceOperator):
    """Runs the operators of a Data-Juicer recipe file (``config_path``) over the experiences.

    Same samples and same effect as ``DataJuicerExperienceOperator``; the recipe's
    ``text_keys`` is the field an operator without its own ``text_key`` reads, and its ``np``
    the worker processes of each operator.
    """

    name = "data_juicer"

    @staticmethod
    def config_problems(args: dict[str, Any]) -> list[str]:
        """What a config check refuses in the recipe file, when it is found from here."""
        return recipe_file_problems(str(args["config_path"])) if "config_path" in args else []

    def __init__(self, config_path: str):
        if not data_juicer_installed():
            raise UserError(
                "The 'data_juicer' operator needs the optional Data-Juicer package, which is not "
                "installed. Install it with `pip install py-data-juicer`, or remove the operator "
                "from data_processor.experience_pipeline.operators."
            )
        operators, defaults = read_recipe(config_path)
        known = data_juicer_operators()
        self.operators = []
        for name, args in operators:
            if name not in known:
                raise UserError(f"unknown Data-Juicer operator '{name}' in {config_path}")
            check_experience_fields(name, [{**defaults, **args}["text_key"]])
            self.operators.append(build_operator(name, {**defaults, **args}, on_experiences=True))

    def process(self, experiences):
        samples = [experience_sample(e, i) for i, e in enumerate(experiences)]
        kept = kept_experiences(experiences, run_operators(self.operators, samples))
        return kept, {"dropped": float(len(experiences) - len(kept))}
