"""The trainer's side of a checkpoint: what it saves of itself, and how it resumes from one.

``TrainerCheckpoints`` is the part of ``Trainer`` that turns its actor, critic, optimizers,
schedules and step into a checkpoint and back: on one process through ``checkpoint.py``
alone; sharded over several ranks, each rank writes its shards (``sharded_checkpoint.py``)
and rank 0 writes the rest of the usual layout. Loading reads either kind on any number of
ranks, and refuses a checkpoint that holds the other kind of actor (a LoRA adapter or whole
weights) than the run trains. The layout on disk, its safety against kills and its checks
belong to ``checkpoint.py``; this module never trains. Saving and loading are collectives:
``@on_every_rank`` runs them on every rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trivium.errors import UserError
from trivium.models.lora_delta import is_adapter_dir
from trivium.trainer import checkpoint as ckpt
from trivium.trainer import lora
from trivium.trainer.critic import CriticModel
from trivium.trainer.rank_group import on_every_rank
from trivium.trainer.sharded_checkpoint import (
    SHARDED_DIR,
    full_model_state,
    is_sharded_save,
    load_full_model_state,
    load_sharded,
    load_unsharded_optimizer_state,
    save_sharded,
)
from trivium.trainer.trainer_setup import load_causal_lm

if TYPE_CHECKING:
    from trivium.trainer.data_parallel import DataParallel
    from trivium.trainer.rank_group import RankGroup
    from trivium.trainer.settings import TrainerSettings


class TrainerCheckpoints:
    """Mixed into ``Trainer``, which sets these attributes."""

    settings: TrainerSettings
    parallel: DataParallel
    rank_group: RankGroup | None
    run_dir: Path
    device: torch.device
    tokenizer: Any
    global_step: int
    actor: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    critic: CriticModel | None
    critic_optimizer: torch.optim.Optimizer | None
    model_version: int

    @on_every_rank
    def save_checkpoint(self, *, export_hf: bool, extra_files: dict[str, dict] | None = None) -> Path:
        if self.parallel.sharded:
            return self._save_sharded_checkpoint(export_hf=export_hf, extra_files=extra_files)
        merge_adapter = export_hf and self.settings.lora is not None
        return ckpt.save_checkpoint(
            self.run_dir,
            self.global_step,
            actor=self.actor,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            trainer_state={"model_version": self.model_version},
            tokenizer=self.tokenizer,
            export_hf=export_hf,
            export_model=lora.merged_copy(self.actor) if merge_adapter else None,
            critic=self.critic,
            critic_optimizer=self.critic_optimizer,
            extra_files=extra_files,
        )

    def _save_sharded_checkpoint(self, *, export_hf: bool, extra_files: dict[str, dict] | None) -> Path:
        """Every rank writes its shards (model and optimizer); rank 0 gathers the whole weights
        and writes the rest of the usual layout, so readers of ``actor/`` see no difference."""
        leads = self.rank_group.leads
        staging = ckpt.staging_dir(self.run_dir, self.global_step)
        if leads:
            ckpt.prepare_staging(self.run_dir, self.global_step)
        self.rank_group.barrier()  # the staging directory is clean before anyone writes into it
        save_sharded(staging / "actor" / SHARDED_DIR, model=self.actor, optimizer=self.optimizer)
        # Under LoRA the adapter alone (saved in peft's format); the export merges it into the base.
        actor_weights = full_model_state(self.actor, trainable_only=self.settings.lora is not None)
        export_weights = None
        if export_hf and self.settings.lora is not None:
            export_weights = {name: tensor.cpu() for name, tensor in lora.merged_tensors(self.actor) if leads}
        critic_weights = None
        if self.critic is not None:
            save_sharded(staging / "critic" / SHARDED_DIR, model=self.critic, optimizer=self.critic_optimizer)
            critic_weights = full_model_state(self.critic)
        if not leads:
            return ckpt.step_dir(self.run_dir, self.global_step)
        return ckpt.save_checkpoint(
            self.run_dir,
            self.global_step,
            actor=self.actor,
            optimizer=None,
            scheduler=self.scheduler,
            trainer_state={
                "model_version": self.model_version,
                "data_parallel_size": self.parallel.world_size,
            },
            tokenizer=self.tokenizer,
            export_hf=export_hf,
            actor_weights=actor_weights,
            export_model=self.actor.get_base_model() if export_weights is not None else None,
            export_weights=export_weights,
            critic=self.critic,
            critic_weights=critic_weights,
            extra_files=extra_files,
            staged=True,
        )

    @on_every_rank
    def load_checkpoint(self, step: int) -> None:
        """Resume from ``global_step_<step>``, saved by any number of ranks."""
        ckpt.check_loadable(self.run_dir, step)
        directory = ckpt.step_dir(self.run_dir, step)
        state = ckpt.load_optimizer_state(self.run_dir, step)
        self._check_actor_kind(directory / "actor")
        if is_sharded_save(directory / "actor"):
            load_sharded(directory / "actor" / SHARDED_DIR, model=self.actor, optimizer=self.optimizer)
        else:
            self.load_actor_weights(directory / "actor")
            self._load_unsharded_optimizer(self.actor, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        critic_dir = directory / "critic"
        if self.critic is not None and critic_dir.exists():
            if is_sharded_save(critic_dir):
                load_sharded(critic_dir / SHARDED_DIR, model=self.critic, optimizer=self.critic_optimizer)
            else:
                self._load_whole_weights(
                    self.critic, CriticModel.from_pretrained(str(critic_dir)).state_dict()
                )
                critic_state = ckpt.load_optimizer_state(self.run_dir, step, "critic")["optimizer"]
                self._load_unsharded_optimizer(self.critic, self.critic_optimizer, critic_state)
        self.global_step = int(ckpt.load_trainer_state(self.run_dir, step)["global_step"])

    def _load_whole_weights(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        if self.parallel.sharded:
            load_full_model_state(model, state)
        else:
            model.load_state_dict(state)

    def _load_unsharded_optimizer(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict
    ) -> None:
        if self.parallel.sharded:
            load_unsharded_optimizer_state(model, optimizer, state)
        else:
            optimizer.load_state_dict(state)

    def _check_actor_kind(self, actor_dir: Path) -> None:
        """A checkpoint resumes a run that trains what it saved: an adapter or whole weights."""
        saved_adapter = is_adapter_dir(actor_dir)
        if saved_adapter != (self.settings.lora is not None):
            held = "a LoRA adapter" if saved_adapter else "whole weights"
            fix = "set model.lora_configs as in that run" if saved_adapter else "remove model.lora_configs"
            raise UserError(f"the checkpoint {actor_dir} holds {held}; to resume from it, {fix}")

    def load_actor_weights(self, actor_dir: Path) -> None:
        """The actor of a checkpoint: whole weights, or a LoRA adapter when LoRA is configured."""
        self._check_actor_kind(actor_dir)
        if self.settings.lora is not None:
            lora.check_checkpoint_adapter(actor_dir, self.settings.lora)
            lora.load_adapter(self.actor, actor_dir)
            return
        loaded = load_causal_lm(str(actor_dir), self.settings.dtype, device=str(self.device))
        self._load_whole_weights(self.actor, loaded.state_dict())
