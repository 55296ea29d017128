"""Checkpoints in the run directory.

Layout (``N`` = trainer step):
  global_step_N/actor/            the actor in Hugging Face format (config + safetensors), or
                                  under LoRA its adapter in peft's format (adapter_config.json +
                                  adapter_model.safetensors), plus optimizer.pt and trainer_state.json
  global_step_N/actor/huggingface a self-contained export with the tokenizer (save_hf_checkpoint);
                                  under LoRA the base model with the adapter merged in
  global_step_N/critic/           the critic trunk, value head and optimizer (ppo)
  global_step_N/{actor,critic}/sharded/  saved by several ranks: the shards of the trainable
                                  weights (under LoRA the adapter) and of the optimizer state
                                  (torch.distributed.checkpoint); optimizer.pt then holds the
                                  scheduler alone. The files above are still saved whole.
  global_step_N/explorer_state.json  where the explorer stood in its data
  latest_checkpointed_iteration.txt

A checkpoint is written to ``global_step_N.tmp`` and renamed when complete, so a process
killed mid-save never leaves a half checkpoint that a resume would pick up. Re-saving an
existing step never deletes the old directory first: it is renamed aside to
``global_step_N.old``, the new one renamed in, then the old one deleted;
``recover_interrupted_save`` repairs a save killed between those renames.

A checkpoint whose files are missing, truncated or unreadable is refused with a message
(``checkpoint_problem``); ``valid_checkpoints`` and ``latest_checkpoint`` skip such ones and
log why, so a resume falls back to the previous good checkpoint.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch

from trivium.errors import UserError

logger = logging.getLogger(__name__)

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
    """The newest checkpoint that passes ``checkpoint_problem``; broken newer ones are logged and skipped."""
    steps = valid_checkpoints(run_dir, first_only=True)
    return steps[0] if steps else None


_reported: set[tuple[str, int]] = set()


def valid_checkpoints(run_dir: str | Path, *, first_only: bool = False) -> list[int]:
    """Steps of complete, readable checkpoints, newest first; broken ones are logged (once) and skipped."""
    valid = []
    for step in reversed(list_checkpoints(run_dir)):
        problem = checkpoint_problem(run_dir, step)
        if problem is None:
            valid.append(step)
            if first_only:
                break
        elif (str(run_dir), step) not in _reported:
            _reported.add((str(run_dir), step))
            logger.warning("skipping checkpoint %s: %s", step_dir(run_dir, step), problem)
    return valid


def checkpoint_problem(run_dir: str | Path, step: int) -> str | None:
    """Why ``global_step_<step>`` cannot be loaded (missing, truncated or unreadable files), or None."""
    actor = step_dir(run_dir, step) / "actor"
    try:
        state = json.loads((actor / "trainer_state.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "actor/trainer_state.json is missing (the save did not finish)"
    except (ValueError, OSError) as error:
        return f"actor/trainer_state.json is unreadable: {error}"
    if not isinstance(state, dict) or state.get("global_step") != step:
        return f"actor/trainer_state.json records step {state.get('global_step') if isinstance(state, dict) else state!r}, not {step}"
    for component in (actor, actor.parent / "critic"):
        if (component / "sharded").is_dir() and not (component / "sharded" / ".metadata").is_file():
            return f"{component.name}/sharded has no .metadata (the sharded save did not finish)"
    if (actor / "tinker_state.json").is_file():  # the weights are on the Tinker service (tinker_client)
        return None
    if (actor / "adapter_config.json").is_file():  # a LoRA run saves its adapter, in peft's format
        weights = sorted(actor.glob("adapter_model.safetensors"))
        if not weights:
            return "actor has adapter_config.json but no adapter_model.safetensors"
    elif not (actor / "config.json").is_file():
        return "actor/config.json is missing"
    else:
        weights = sorted(actor.glob("*.safetensors"))
    if not weights:
        return "actor has no *.safetensors weights"
    for path in weights + sorted((actor.parent / "critic").glob("*.safetensors")):
        problem = _safetensors_problem(path)
        if problem:
            return f"{path.relative_to(actor.parent)} {problem}"
    critic_optimizer = actor.parent / "critic" / "optimizer.pt"
    for path in [actor / "optimizer.pt"] + ([critic_optimizer] if critic_optimizer.exists() else []):
        if not _is_complete_zip(path):
            return f"{path.relative_to(actor.parent)} is missing or truncated"
    return None


def _safetensors_problem(path: Path) -> str | None:
    from safetensors import safe_open

    try:
        # Opening checks the header against the file size: a truncated file fails here.
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                handle.get_slice(name)
    except Exception as error:  # safetensors raises its own SafetensorError, or OSError
        return f"is truncated or corrupt ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
    return None


def _is_complete_zip(path: Path) -> bool:
    """torch.save writes a zip archive; its directory sits at the end, so truncation is caught."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def aside_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / f"global_step_{step}.old"


def recover_interrupted_save(run_dir: str | Path) -> list[int]:
    """Finish or undo re-saves killed between their renames; returns the steps repaired.

    Call it once at start, before looking for a checkpoint to resume from, while no other
    process writes checkpoints into ``run_dir``.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    repaired = []
    for aside in sorted(run_dir.glob("global_step_*.old")):
        match = re.match(r"^global_step_(\d+)\.old$", aside.name)
        if not match:
            continue
        step = int(match.group(1))
        final = step_dir(run_dir, step)
        if not final.exists():
            fresh = final.with_name(final.name + ".tmp")
            complete = (fresh / "actor" / "trainer_state.json").exists()
            # The new copy was complete when the save was killed: finish the save; else keep the old one.
            os.replace(fresh if complete else aside, final)
            logger.warning("recovered %s from an interrupted save (%s copy)", final, "new" if complete else "previous")
        shutil.rmtree(aside, ignore_errors=True)
        repaired.append(step)
    return repaired


def staging_dir(run_dir: str | Path, step: int) -> Path:
    """Where checkpoint ``step`` is written before it is renamed into place."""
    final = step_dir(run_dir, step)
    return final.with_name(final.name + ".tmp")


def prepare_staging(run_dir: str | Path, step: int) -> Path:
    """Repair interrupted saves and clear the staging directory of ``step``; returns it."""
    tmp = staging_dir(run_dir, step)
    recover_interrupted_save(run_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


# Free space below this after a failed write means the disk filled up (the failed file took the rest).
FULL_DISK_BYTES = 1 << 20


def free_bytes(path: str | Path) -> int:
    """Bytes this process may still write on ``path``'s file system (root may use the reserve)."""
    stats = os.statvfs(path)
    return (stats.f_bfree if os.geteuid() == 0 else stats.f_bavail) * stats.f_frsize


def save_checkpoint(run_dir: str | Path, step: int, **parts: Any) -> Path:
    """Write checkpoint ``step`` (see ``_save_checkpoint``). A writer that fails on a full disk
    without saying so (``torch.save`` raises a RuntimeError) is reported as the ``OSError`` it is,
    and the half-written staging directory is removed to give the space back."""
    try:
        return _save_checkpoint(run_dir, step, **parts)
    except OSError:
        raise
    except Exception as error:
        if free_bytes(run_dir) >= FULL_DISK_BYTES:
            raise
        tmp = staging_dir(run_dir, step)
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp)) from error


def _save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    actor: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any,
    trainer_state: dict[str, Any],
    tokenizer: Any = None,
    export_hf: bool = False,
    export_model: torch.nn.Module | None = None,
    export_weights: dict[str, torch.Tensor] | None = None,
    actor_weights: dict[str, torch.Tensor] | None = None,
    critic: torch.nn.Module | None = None,
    critic_optimizer: torch.optim.Optimizer | None = None,
    critic_weights: dict[str, torch.Tensor] | None = None,
    extra_files: dict[str, dict] | None = None,
    staged: bool = False,
) -> Path:
    """Write checkpoint ``step``. ``staged``: the ranks of a sharded trainer already wrote their
    shards into the staging directory, and ``optimizer`` is None (its state is in the shards);
    ``actor_weights``/``critic_weights`` are then the gathered whole weights to save (under
    LoRA ``actor_weights`` is the adapter, and ``export_weights`` the merged weights that
    ``export_model`` exports)."""
    final = step_dir(run_dir, step)
    tmp = staging_dir(run_dir, step) if staged else prepare_staging(run_dir, step)
    actor_dir = tmp / "actor"
    actor.save_pretrained(actor_dir, safe_serialization=True, state_dict=actor_weights)
    if tokenizer is not None:
        tokenizer.save_pretrained(actor_dir)  # the actor directory loads on its own
    optimizer_state = {"optimizer": optimizer.state_dict()} if optimizer is not None else {}
    torch.save({**optimizer_state, "scheduler": scheduler.state_dict()}, actor_dir / "optimizer.pt")
    if export_hf:
        hf_dir = actor_dir / "huggingface"
        # A LoRA actor saves its adapter above; the export is the model with the adapter merged in.
        if export_model is not None:
            export_model.save_pretrained(hf_dir, safe_serialization=True, state_dict=export_weights)
        else:
            actor.save_pretrained(hf_dir, safe_serialization=True, state_dict=actor_weights)
        if tokenizer is not None:
            tokenizer.save_pretrained(hf_dir)
    if critic is not None:
        critic_dir = tmp / "critic"
        trunk_state = head_state = None
        if critic_weights is not None:
            trunk_state = {k.removeprefix("trunk."): v for k, v in critic_weights.items() if k.startswith("trunk.")}
            head_state = {k.removeprefix("value_head."): v for k, v in critic_weights.items() if k.startswith("value_head.")}
        critic.trunk.save_pretrained(critic_dir, safe_serialization=True, state_dict=trunk_state)
        critic.save_value_head(critic_dir, state=head_state)
        if critic_optimizer is not None:
            torch.save({"optimizer": critic_optimizer.state_dict()}, critic_dir / "optimizer.pt")
    for name, content in (extra_files or {}).items():
        text = json.dumps(content)
        # Small states are indented for people to read; buffered experiences stay compact.
        (tmp / name).write_text(json.dumps(content, indent=2) if len(text) < 65536 else text)
    # trainer_state.json last: its presence marks the actor directory complete.
    (actor_dir / "trainer_state.json").write_text(json.dumps({"global_step": step, **trainer_state}, indent=2))
    install(tmp, final, aside_dir(run_dir, step))
    write_atomically(Path(run_dir) / LATEST_FILE, str(step))
    return final


def install(new: Path, final: Path, aside: Path) -> None:
    """Put ``new`` at ``final`` so that a kill at any moment leaves a complete checkpoint on disk."""
    shutil.rmtree(aside, ignore_errors=True)
    if final.exists():
        os.replace(final, aside)  # the old copy stays whole until the new one is in place
    os.replace(new, final)
    shutil.rmtree(aside, ignore_errors=True)


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


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


def check_loadable(run_dir: str | Path, step: int) -> None:
    """Raise a UserError naming the checkpoint and what is wrong with it, and the newest good one."""
    problem = checkpoint_problem(run_dir, step)
    if problem is None:
        return
    others = [s for s in valid_checkpoints(run_dir) if s != step]
    fallback = f"the newest readable one is global_step_{others[0]}" if others else "no other checkpoint is readable"
    raise UserError(f"Checkpoint {step_dir(run_dir, step)} cannot be loaded: {problem}; {fallback}.")


def load_trainer_state(run_dir: str | Path, step: int) -> dict[str, Any]:
    return json.loads((step_dir(run_dir, step) / "actor" / "trainer_state.json").read_text())


def load_optimizer_state(run_dir: str | Path, step: int, component: str = "actor") -> dict[str, Any]:
    return torch.load(step_dir(run_dir, step) / component / "optimizer.pt", weights_only=False)
