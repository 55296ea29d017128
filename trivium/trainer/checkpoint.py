"""Checkpoints in the run directory.

Layout (``N`` = trainer step):
  global_step_N/actor/            the actor in Hugging Face format (config + safetensors),
                                  plus optimizer.pt and trainer_state.json
  global_step_N/actor/huggingface a self-contained export with the tokenizer (save_hf_checkpoint)
  global_step_N/critic/           the critic trunk, value head and optimizer (ppo)
  global_step_N/explorer_state.json  where the explorer stood in its data
  latest_checkpointed_iteration.txt

A checkpoint is written to ``global_step_N.tmp`` and renamed when complete, so a process
killed mid-save never leaves a half checkpoint that a resume would pick up.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch

LATEST_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / f"global_step_{step}"


def list_checkpoints(run_dir: str | Path) -> list[int]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    steps = []
    for child in run_dir.iterdir():
        match = STEP_DIR.match(child.name)
        if match and (child / "actor" / "trainer_state.json").exists():
            steps.append(int(match.group(1)))
    return sorted(steps)


def latest_checkpoint(run_dir: str | Path) -> int | None:
    steps = list_checkpoints(run_dir)
    return steps[-1] if steps else None


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    actor: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    tokenizer: Any = None,
    export_hf: bool = False,
    critic: torch.nn.Module | None = None,
    critic_optimizer: torch.optim.Optimizer | None = None,
    extra_files: dict[str, dict] | None = None,
) -> Path:
    final = step_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    actor_dir = tmp / "actor"
    actor.save_pretrained(actor_dir, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(actor_dir)  # the actor directory loads on its own
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, actor_dir / "optimizer.pt")
    if export_hf:
        hf_dir = actor_dir / "huggingface"
        actor.save_pretrained(hf_dir, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(hf_dir)
    if critic is not None:
        critic_dir = tmp / "critic"
        critic.trunk.save_pretrained(critic_dir, safe_serialization=True)
        critic.save_value_head(critic_dir)
        if critic_optimizer is not None:
            torch.save({"optimizer": critic_optimizer.state_dict()}, critic_dir / "optimizer.pt")
    for name, content in (extra_files or {}).items():
        (tmp / name).write_text(json.dumps(content, indent=2))
    # trainer_state.json last: its presence marks the actor directory complete.
    (actor_dir / "trainer_state.json").write_text(json.dumps({"global_step": step, **trainer_state}, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (Path(run_dir) / LATEST_FILE).write_text(str(step))
    return final


def prune_checkpoints(run_dir: str | Path, keep: int | None, *, protect: set[int] = frozenset()) -> list[int]:
    """Delete the oldest checkpoints beyond ``keep``; returns the steps removed."""
    if not keep or keep <= 0:
        return []
    steps = list_checkpoints(run_dir)
    removed = []
    for step in steps[:-keep]:
        if step in protect:
            continue
        shutil.rmtree(step_dir(run_dir, step), ignore_errors=True)
        removed.append(step)
    return removed


def strip_hf_exports(run_dir: str | Path, *, except_step: int) -> None:
    """With save_hf_checkpoint=last, only the newest checkpoint keeps its export."""
    for step in list_checkpoints(run_dir):
        if step != except_step:
            shutil.rmtree(step_dir(run_dir, step) / "actor" / "huggingface", ignore_errors=True)


def load_trainer_state(run_dir: str | Path, step: int) -> dict[str, Any]:
    return json.loads((step_dir(run_dir, step) / "actor" / "trainer_state.json").read_text())


def load_optimizer_state(run_dir: str | Path, step: int, component: str = "actor") -> dict[str, Any]:
    return torch.load(step_dir(run_dir, step) / component / "optimizer.pt", weights_only=False)
