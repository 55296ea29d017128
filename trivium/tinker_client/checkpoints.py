"""A Tinker run's checkpoints: the service keeps the weights, the run directory keeps their paths.

``global_step_N/actor/`` holds ``tinker_state.json`` (the service's ``tinker://`` path of the
weights with the optimizer state, the last sampler path, the base model and LoRA rank) beside
the tokenizer and ``trainer_state.json``; the explorer's position and the trainer's input sit
beside it as in every checkpoint. It is written through the same staging directory and
atomic rename as a local checkpoint, so a killed save never leaves half of one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trivium.errors import UserError
from trivium.trainer import checkpoint as ckpt

STATE_FILE = "tinker_state.json"


def save_service_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    service_state: dict[str, Any],
    trainer_state: dict[str, Any],
    tokenizer: Any = None,
    extra_files: dict[str, dict] | None = None,
) -> Path:
    tmp = ckpt.prepare_staging(run_dir, step)
    actor_dir = tmp / "actor"
    actor_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(actor_dir)
    (actor_dir / STATE_FILE).write_text(json.dumps(service_state, indent=2))
    for name, content in (extra_files or {}).items():
        (tmp / name).write_text(json.dumps(content))
    # trainer_state.json last: its presence marks the actor directory complete.
    (actor_dir / "trainer_state.json").write_text(
        json.dumps({"global_step": step, **trainer_state}, indent=2)
    )
    final = ckpt.step_dir(run_dir, step)
    ckpt.install(tmp, final, ckpt.aside_dir(run_dir, step))
    ckpt.write_atomically(Path(run_dir) / ckpt.LATEST_FILE, str(step))
    return final


def load_service_state(run_dir: str | Path, step: int) -> dict[str, Any]:
    path = ckpt.step_dir(run_dir, step) / "actor" / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path.parent.parent} was not saved by a Tinker run ({STATE_FILE} is missing): a run with "
            "model.tinker.enable resumes only from its own checkpoints"
        ) from None
    if not isinstance(state, dict) or not state.get("state_path"):
        raise UserError(f"{path} records no service checkpoint path (state_path)")
    return state
