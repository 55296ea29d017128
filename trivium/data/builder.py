"""Write a generated task dataset to disk in a layout ``datasets.load_dataset(DIR)`` reads.

Owns ``trivium init data``'s file writing: one file per split, named after the split
(``train.jsonl`` and ``test.jsonl``, or ``.parquet``), which the ``datasets`` library maps
to the ``train`` and ``test`` splits by name. Problem generation lives in the task modules.
"""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trivium.data.arithmetic import generate_arithmetic
from trivium.data.countdown import generate_countdown
from trivium.data.frozen_lake import generate_frozen_lake
from trivium.data.guessing import generate_guessing
from trivium.data.gymnasium_tasks import generate_gymnasium
from trivium.data.reasoning_gym_tasks import (
    REASONING_GYM_PREFIX,
    check_dataset_name,
    config_fields,
    generate_reasoning_gym,
    is_reasoning_gym_task,
)
from trivium.data.textworld_games import generate_textworld
from trivium.data.tool_arithmetic import generate_tool_arithmetic
from trivium.errors import UserError

TASK_GENERATORS: dict[str, Callable[..., list[dict]]] = {
    "arithmetic": generate_arithmetic,
    "countdown": generate_countdown,
    "frozen_lake": generate_frozen_lake,
    "guessing": generate_guessing,
    "gymnasium": generate_gymnasium,
    "textworld": generate_textworld,
    "tool_arithmetic": generate_tool_arithmetic,
}
FORMATS = ("jsonl", "parquet")
# Given by build_task_data, not options: a generator that writes files besides its rows takes out_dir.
GENERATOR_ARGS = ("count", "rng", "out_dir")
SPLITS = ("train", "test")


def task_options(task: str) -> list[str]:
    """The extra keyword options a task's generator accepts (e.g. ``subtraction``)."""
    if is_reasoning_gym_task(task):
        return config_fields(task.removeprefix(REASONING_GYM_PREFIX))
    parameters = inspect.signature(TASK_GENERATORS[task]).parameters
    return [name for name in parameters if name not in GENERATOR_ARGS]


def build_task_data(
    task: str,
    out_dir: str | Path,
    seed: int = 0,
    num_train: int = 1000,
    num_test: int = 100,
    fmt: str = "jsonl",
    overwrite: bool = False,
    **options: Any,
) -> Path:
    """Generate ``num_train + num_test`` distinct problems and write them as train/test splits.

    Rows have ``question`` (prompt), ``answer`` (ground truth text) and ``response`` (an
    SFT target, ``<answer>...</answer>``); countdown rows also have ``numbers`` and
    ``target``; frozen_lake rows have ``map``, ``question`` (its first observation) and a
    random move as ``response``; guessing rows have ``secret``, ``low``, ``high``,
    ``question`` and a random number as ``response``; gymnasium rows have ``env_id``,
    ``env_kwargs``, ``seed``, ``question`` and a random action as ``response``; textworld
    rows point at games compiled under ``out_dir/games`` (``trivium.data.textworld_games``). The same
    arguments always write the same rows. ``reasoning_gym:NAME`` rows are laid out in
    ``trivium.data.reasoning_gym_tasks``, tool_arithmetic rows (calculator tool, SFT
    transcript in ``messages``) in ``trivium.data.tool_arithmetic``. Returns ``out_dir``.
    """
    if is_reasoning_gym_task(task):
        check_dataset_name(task.removeprefix(REASONING_GYM_PREFIX))
    elif task not in TASK_GENERATORS:
        choices = ", ".join([*TASK_GENERATORS, f"{REASONING_GYM_PREFIX}NAME"])
        raise UserError(f"Unknown task '{task}'. Choose one of: {choices}.")
    if fmt not in FORMATS:
        raise UserError(f"Unknown format '{fmt}'. Choose one of: {', '.join(FORMATS)}.")
    if num_train < 1 or num_test < 0:
        raise UserError(f"--num-train must be >= 1 and --num-test >= 0, got {num_train} and {num_test}")
    unknown = set(options) - set(task_options(task))
    if unknown:
        raise UserError(
            f"Option(s) {', '.join(sorted(unknown))} do not apply to task '{task}'; "
            f"it accepts: {', '.join(task_options(task)) or '(none)'}."
        )

    out_dir = Path(out_dir)
    existing = [path for split in SPLITS for ext in FORMATS if (path := out_dir / f"{split}.{ext}").exists()]
    if existing and not overwrite:
        raise UserError(f"{existing[0]} already exists; pass --overwrite or choose another --out directory.")
    for path in existing:
        path.unlink()

    if is_reasoning_gym_task(task):
        dataset = task.removeprefix(REASONING_GYM_PREFIX)
        rows = generate_reasoning_gym(dataset, num_train + num_test, seed, options)
    else:
        generator = TASK_GENERATORS[task]
        if "out_dir" in inspect.signature(generator).parameters:
            options["out_dir"] = out_dir
        rows = generator(num_train + num_test, random.Random(seed), **options)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits = {"train": rows[:num_train], "test": rows[num_train:]}
    for split, split_rows in splits.items():
        if split_rows:
            write_rows(split_rows, out_dir / f"{split}.{fmt}")
    return out_dir


def write_rows(rows: list[dict], path: Path) -> None:
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as file:
            for row in rows:
                file.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        # pyarrow comes with ``datasets``; imported here so jsonl never pays for it.
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
