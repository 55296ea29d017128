"""Sharded model and optimizer states with ``torch.distributed.checkpoint`` (DCP).

Each rank writes its own shards into one directory, keyed by parameter names, so a run
can resume on a different number of ranks (DCP reshards on load), including one process
with no process group and an unsharded model. Only trainable parameters (and buffers) are
saved: frozen ones, a LoRA actor's base weights, are the model path's and load from there.
The whole-weights files next to it (for Hugging Face and the rollout engines) are written
by ``checkpoint.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)

SHARDED_DIR = "sharded"  # inside global_step_N/actor and global_step_N/critic


def is_sharded_save(component_dir: Path) -> bool:
    return (component_dir / SHARDED_DIR).is_dir()


# Frozen weights stay out of the shards; loading leaves them as the model path gave them.
TRAINABLE = StateDictOptions(ignore_frozen_params=True, strict=False)


def _trainable_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    model_state, optimizer_state = get_state_dict(model, optimizer, options=TRAINABLE)
    # A frozen weight tied under a second name (a LoRA actor's lm_head, tied to its embeddings).
    frozen = {name for name, param in model.named_parameters(remove_duplicate=False) if not param.requires_grad}
    return {"model": {k: v for k, v in model_state.items() if k not in frozen}, "optimizer": optimizer_state}


def save_sharded(directory: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank: write this rank's shards of the model's trainable weights and its optimizer state."""
    dcp.save(_trainable_state(model, optimizer), checkpoint_id=str(directory))


def load_sharded(directory: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank: read back what ``save_sharded`` wrote, resharded to this run's ranks.

    DCP reads every key of this model's state (a key missing from the save is an error), so
    ``strict=False`` only lets the frozen weights, never saved, keep their values.
    """
    state = _trainable_state(model, optimizer)
    dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=TRAINABLE)


def full_model_state(model: torch.nn.Module, *, trainable_only: bool = False) -> dict[str, torch.Tensor]:
    """Every rank: gather the whole weights (or the trainable ones: a LoRA adapter) into CPU
    memory on rank 0 (empty on the others)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
    return get_model_state_dict(model, options=options)


def load_full_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Every rank: put whole weights (each rank holds them) into a sharded model."""
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def load_unsharded_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """An optimizer state saved by one unsharded process (parameters by position) into a sharded one.

    The position of a parameter is its place among the model's trainable parameters, the
    order ``optim.build_optimizer`` gave the optimizer; names are the same after sharding.
    """
    names = [name for name, param in model.named_parameters() if param.requires_grad]
    by_name = {
        "state": {names[index]: value for index, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))
