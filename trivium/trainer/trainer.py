"""The PyTorch trainer: one ``train_step`` turns a batch of experiences into one update.

    train_step = build_batch -> compute_reference -> compute_values -> compute_advantages
                 -> update_policy -> update_critic

The loss math lives in ``trivium.algorithm`` (the actor's terms put together per micro-batch by
``policy_objective.py``); this module only moves tensors, accumulates gradients over
micro-batches and steps optimizers. Its models are built by ``trainer_setup.py``; what it
saves in a checkpoint and how it resumes, ``trainer_checkpoints.py``; what a weight sync
sends, ``weight_source.py``.

With ``data_parallel_size`` N > 1 the models are sharded with FSDP2 over N ranks (or, with
the ``ddp`` strategy, replicated on each, gradients all-reduced): this
object is rank 0, which starts the others (``rank_group.py``: local processes, or Ray actors
when Ray places the run); each rank runs its share of
every batch's micro-batches (``data_parallel.py``) and the update equals one process's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from trivium.algorithm.advantages import (
    ADVANTAGE_FNS,
    requires_entropy,
    requires_episodes,
    requires_teacher,
    response_mask_filter,
)
from trivium.algorithm.aggregation import masked_mean
from trivium.algorithm.decoupled import behaviour_importance_weights
from trivium.algorithm.kl import KL_FNS, adaptive_kl_coef, apply_kl_penalty
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, pairs_rows
from trivium.algorithm.value_loss import clipped_value_loss
from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience, episode_index
from trivium.core.metric_names import CRITIC_UPDATE_SKIPPED, UPDATE_SKIPPED
from trivium.registry import load_plugin_dir, loaded_plugin_dirs
from trivium.trainer import lora
from trivium.trainer.data_parallel import DataParallel, MicroBatchShare
from trivium.trainer.engine_logprobs import engine_old_logprobs
from trivium.trainer.forward import response_logprobs, whole_batch_entropy_terms, whole_batch_logprobs
from trivium.trainer.fsdp import clip_gradients
from trivium.trainer.micro_batch import loss_scale, plan_micro_batches
from trivium.trainer.policy_objective import PolicyObjective
from trivium.trainer.rank_group import RankGroup, RankLauncher, follow, on_every_rank
from trivium.trainer.sampling_mask import require_sampling_masks, sampling_mask_metrics
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.staleness import control_staleness
from trivium.trainer.token_head import logit_chunk_tokens
from trivium.trainer.trainer_base import TrainerBase
from trivium.trainer.trainer_checkpoints import TrainerCheckpoints
from trivium.trainer.trainer_setup import build_trainer_models
from trivium.trainer.weight_source import WeightSource


class Trainer(TrainerBase, WeightSource, TrainerCheckpoints):
    def __init__(
        self,
        settings: TrainerSettings,
        *,
        rank_group: RankGroup | None = None,
        rank_launcher: RankLauncher | None = None,
        **built_with: Any,
    ):
        """``built_with``: ``TrainerBase``'s arguments (run_dir, tokenizer, pad_token_id, logger)."""
        TrainerBase.__init__(self, settings, **built_with)
        # Rank 0 starts the other ranks first: they load their models while it loads its own.
        if rank_group is None and settings.data_parallel_size > 1:
            rank_group = start_ranks(
                settings, run_dir=self.run_dir, pad_token_id=self.pad_token_id, launcher=rank_launcher
            )
        self.rank_group = rank_group
        self.parallel = DataParallel(rank=rank_group.rank, world_size=rank_group.world_size) if rank_group else DataParallel()
        # The KL penalty's coefficient; the adaptive controller moves it after every penalty.
        self.kl_penalty_coef = settings.loss.kl_penalty_coef
        # Sharded: this rank's shards of weight versions staged for a streamed broadcast
        self.staged_shards: dict[int, dict[str, torch.Tensor]] = {}
        self.device = rank_group.device if rank_group else torch.device(settings.device)
        if rank_group is not None and rank_group.leads:
            # Loading and sharding are collectives: a rank lost meanwhile is named, and the others stopped.
            with rank_group.leading_set_up():
                self._load_models()
        else:
            self._load_models()

    def _load_models(self) -> None:
        """The actor, its reference, the critic, their optimizers and schedules (sharded over the ranks)."""
        models = build_trainer_models(self.settings, device=self.device, parallel=self.parallel)
        self.actor, self.reference, self.critic = models.actor, models.reference, models.critic
        self.optimizer, self.scheduler = models.optimizer, models.scheduler
        self.critic_optimizer, self.critic_scheduler = models.critic_optimizer, models.critic_scheduler

    def close(self) -> None:
        """Rank 0: stop the other ranks and leave the process group (nothing to do on one rank)."""
        if self.rank_group is not None and self.rank_group.leads:
            self.rank_group.close()

    def raise_if_ranks_lost(self) -> None:
        if self.rank_group is not None and self.rank_group.leads:
            self.rank_group.raise_if_lost()

    # ------------------------------------------------------------------ the step
    @on_every_rank
    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        start = time.perf_counter()
        experiences, stale_metrics = self.apply_staleness_control(experiences)
        if not experiences:
            return {"trainer/skipped_empty_batch": 1.0, **stale_metrics}
        if self.settings.replay_sampling_mask:
            require_sampling_masks(experiences)
            stale_metrics.update(sampling_mask_metrics(experiences))
        batch = ExperienceBatch.from_experiences(
            experiences, self.pad_token_id, train_truncated_episodes=self.settings.truncation == "keep"
        ).to(self.device)
        plan = self.plan(batch)
        metrics: dict[str, float] = dict(stale_metrics)

        ref_logprobs = self.compute_reference(batch, plan) if self.settings.loss.needs_reference else None
        values = self.compute_values(batch, plan) if self.critic is not None else None
        metrics.update(self.compute_advantages(batch, experiences, values, ref_logprobs))

        old_logprobs = self.compute_old_logprobs(batch, plan, experiences)
        metrics.update(self.update_policy(batch, plan, old_logprobs, ref_logprobs))
        if self.critic is not None:
            metrics.update(self.update_critic(batch, plan, values))

        self.global_step += 1
        elapsed = time.perf_counter() - start
        tokens = batch.num_tokens
        metrics.update(
            {
                "trainer/step": float(self.global_step),
                "time/train_step": elapsed,
                "time/throughput_train_tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
                "trainer/batch_size": float(batch.batch_size),
                "response_length/mean": float(batch.response_mask.sum(dim=1).mean()),
            }
        )
        if self.learns_from_rollouts:
            metrics["reward/mean"] = float(batch.rewards.mean())
        return metrics

    @property
    def share_prompts(self) -> bool:
        # Gradient checkpointing turns the model's cache off, which the shared pass needs.
        # Over several ranks every rank must run the same number of forwards per micro-batch,
        # and whether prompts are shared depends on the rows a rank holds.
        return (
            self.settings.share_prompt_forward
            and not self.settings.gradient_checkpointing
            and not self.parallel.sharded
        )

    @property
    def forward_options(self) -> dict[str, bool | int | None]:
        """Which exact forwards a micro-batch may run (trainer/forward.py picks the cheapest), how
        many positions the head computes at a time, and whether logprobs replay the sampling mask."""
        return {
            "share_prompts": self.share_prompts,
            "pack_sequences": self.settings.pack_sequences,
            "chunk_tokens": logit_chunk_tokens(self.settings.logit_chunk_tokens, self.actor),
            "replay_sampling_mask": self.settings.replay_sampling_mask,
        }

    def plan(self, batch: ExperienceBatch) -> list[list[int]]:
        s = self.settings
        if pairs_rows(POLICY_LOSS_FNS.get(s.loss.policy_loss_fn)):
            # Chosen/rejected pairs must stay together in one micro-batch.
            size = max(2, s.micro_batch_size - s.micro_batch_size % 2)
            rows = list(range(batch.batch_size))
            return [rows[i : i + size] for i in range(0, len(rows), size)]
        return plan_micro_batches(
            batch,
            use_dynamic_bsz=s.use_dynamic_bsz,
            micro_batch_size=s.micro_batch_size,
            max_token_len=s.max_token_len_per_gpu,
            packed=s.pack_sequences,
        )

    # ------------------------------------------------------------------ stages of a step
    @property
    def learns_from_rollouts(self) -> bool:
        """False for sft/dpo, whose experiences come from datasets, not from the policy."""
        return self.settings.learns_from_rollouts

    def apply_staleness_control(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if not self.learns_from_rollouts:
            return experiences, {}
        return control_staleness(
            experiences,
            global_step=self.global_step,
            limit=self.settings.staleness_limit,
            mode=self.settings.staleness_mode,
        )

    def compute_reference(self, batch: ExperienceBatch, plan: list[list[int]]) -> torch.Tensor:
        """Logprobs of the reference policy (the initial weights): (batch, response_len)."""
        if self.reference is not None:
            return self.batch_logprobs(self.reference, batch, plan)
        with lora.reference_model(self.actor) as reference:
            return self.batch_logprobs(reference, batch, plan)

    def batch_logprobs(self, model: torch.nn.Module, batch: ExperienceBatch, plan: list[list[int]]) -> torch.Tensor:
        """Response logprobs (B, R) without grad; each rank computes its micro-batches, then all sum."""
        mine, repeats = self.parallel.split(plan)
        logprobs = whole_batch_logprobs(model, batch, mine, **self.forward_options)
        if repeats:
            whole_batch_logprobs(model, batch, repeats, **self.forward_options)
        return self.parallel.sum_rows(logprobs)

    def batch_entropy_terms(self, batch: ExperienceBatch, plan: list[list[int]]) -> dict[str, torch.Tensor]:
        mine, repeats = self.parallel.split(plan)
        terms = whole_batch_entropy_terms(self.actor, batch, mine, **self.forward_options)
        if repeats:
            whole_batch_entropy_terms(self.actor, batch, repeats, **self.forward_options)
        return {name: self.parallel.sum_rows(tensor) for name, tensor in terms.items()}

    def compute_values(self, batch: ExperienceBatch, plan: list[list[int]]) -> torch.Tensor:
        values = torch.zeros_like(batch.response_mask)
        with torch.no_grad():
            for share, micro in self._micro_batches(batch, plan):
                computed = self.critic.response_values(micro, packed=self.settings.pack_sequences)
                if share.counts:
                    values[share.rows, : micro.response_length] = computed
        return self.parallel.sum_rows(values)

    def compute_advantages(
        self,
        batch: ExperienceBatch,
        experiences: list[Experience],
        values: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
    ) -> dict[str, float]:
        """Fill ``batch.advantages``/``returns`` unless the explorer already did (group-based)."""
        loss = self.settings.loss
        metrics: dict[str, float] = {}
        if loss.advantage_fn is None or all(e.advantages is not None for e in experiences):
            return metrics
        token_rewards = torch.zeros_like(batch.response_mask)
        lengths = batch.attention_mask[:, batch.prompt_length :].sum(dim=1)
        rows = torch.arange(batch.batch_size, device=self.device)
        token_rewards[rows, (lengths - 1).clamp(min=0)] = batch.rewards
        if ref_logprobs is not None and loss.kl_penalty_fn is not None and loss.kl_penalty_coef > 0:
            current = self.batch_logprobs(self.actor, batch, self.plan(batch))
            kl = KL_FNS.get(loss.kl_penalty_fn)(current, ref_logprobs)
            token_rewards, kl_metrics = apply_kl_penalty(token_rewards, kl, batch.response_mask, self.kl_penalty_coef)
            metrics.update(kl_metrics)
            if loss.kl_penalty_adaptive:
                self.kl_penalty_coef = adaptive_kl_coef(
                    kl_coef=self.kl_penalty_coef, current_kl=kl_metrics["kl"], target_kl=loss.kl_penalty_target,
                    horizon=loss.kl_penalty_horizon, batch_size=batch.batch_size,
                )
        group_index = {gid: i for i, gid in enumerate(dict.fromkeys(e.group_id for e in experiences))}
        group_ids = torch.tensor([group_index[e.group_id] for e in experiences], dtype=torch.long, device=self.device)
        advantage_fn = ADVANTAGE_FNS.get(loss.advantage_fn)
        extra: dict[str, Any] = {}
        if requires_entropy(advantage_fn):
            extra = self.batch_entropy_terms(batch, self.plan(batch))
        if requires_teacher(advantage_fn):
            extra.update(old_logprobs=batch.old_logprobs, teacher_logprobs=batch.teacher_logprobs)
        if requires_episodes(advantage_fn):
            extra["episode_ids"] = torch.tensor(episode_index(experiences), dtype=torch.long, device=self.device)
        inputs = dict(
            token_level_rewards=token_rewards,
            response_mask=batch.response_mask,
            group_ids=group_ids,
            values=values,
            baseline_rewards=batch.baseline_rewards,
            **extra,
            **loss.advantage_fn_args,
        )
        advantages, returns = advantage_fn(**inputs)
        batch.advantages, batch.returns = advantages, returns
        narrow_mask = response_mask_filter(advantage_fn)
        if narrow_mask is not None:
            # clipb / clipv: the dropped tokens leave every loss term and every denominator
            batch.response_mask = narrow_mask(**inputs)
        if batch.teacher_logprobs is not None:
            # log pi_student - log pi_teacher per sampled token: a one-sample reverse KL estimate
            metrics["distill/student_teacher_kl"] = float(
                masked_mean(batch.old_logprobs - batch.teacher_logprobs, batch.response_mask)
            )
        return metrics

    def compute_old_logprobs(
        self, batch: ExperienceBatch, plan: list[list[int]], experiences: list[Experience]
    ) -> torch.Tensor | None:
        source = self.settings.old_logprobs_source
        if source == "engine":
            return engine_old_logprobs(batch, experiences)
        if source in ("auto", "decoupled") and self.settings.ppo_epochs == 1:
            return None  # taken from the update's own forward pass, detached (decoupled: the proximal policy)
        return self.batch_logprobs(self.actor, batch, plan)

    def update_policy(
        self,
        batch: ExperienceBatch,
        plan: list[list[int]],
        old_logprobs: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
    ) -> dict[str, float]:
        objective = PolicyObjective(self.settings.loss, learns_from_rollouts=self.learns_from_rollouts)
        # A loss may fix its own aggregation (rec); its micro-batches are weighted by that one.
        agg_mode, pg_agg_mode = self.settings.loss.loss_agg_mode, objective.policy_agg_mode
        totals: dict[str, float] = {}
        grad_norm = torch.tensor(0.0)
        skipped = 0  # optimizer steps left out: non-finite gradients
        for _ in range(self.settings.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for share, micro in self._micro_batches(batch, plan):
                rows = share.rows
                R = micro.response_length
                logprobs, entropy = response_logprobs(
                    self.actor, micro, with_entropy=objective.wants_entropy, **self.forward_options
                )
                old = logprobs.detach() if old_logprobs is None else old_logprobs[rows, :R]
                advantages, weight_metrics = self.decoupled_advantages(micro, old)
                terms = objective.terms(
                    micro, logprobs=logprobs, old_logprobs=old, advantages=advantages, entropy=entropy,
                    ref_logprobs=None if ref_logprobs is None else ref_logprobs[rows, :R],
                    global_step=self.global_step,
                )
                step_metrics = {**terms.metrics, **{f"decoupled/{k}": v for k, v in weight_metrics.items()}}
                weight = loss_scale(micro, batch, agg_mode) if share.counts else 0.0
                # the policy loss weighs by its own aggregation's share (rec may fix it), the rest by loss_agg_mode
                pg_weight = loss_scale(micro, batch, pg_agg_mode) if share.counts else 0.0
                loss = terms.policy_loss * pg_weight + terms.other_terms * weight
                (loss * self.parallel.gradient_scale).backward()
                if share.counts:
                    for key, value in step_metrics.items():
                        totals[key] = totals.get(key, 0.0) + value * weight / self.settings.ppo_epochs
            grad_norm, skip = self._update("actor", self.actor, self.optimizer, self.scheduler)
            skipped += skip
        totals = self.parallel.sum_metrics(totals)
        totals[UPDATE_SKIPPED] = float(skipped)
        totals["actor/grad_norm"] = float(grad_norm)
        totals["actor/lr"] = float(self.scheduler.get_last_lr()[0])
        return totals

    def decoupled_advantages(
        self, micro: ExperienceBatch, proximal_logprobs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's advantages, times pi_prox / pi_engine per token under the decoupled objective."""
        if self.settings.old_logprobs_source != "decoupled":
            return micro.advantages, {}
        weights, metrics = behaviour_importance_weights(
            proximal_logprobs=proximal_logprobs,
            behaviour_logprobs=micro.old_logprobs,
            response_mask=micro.response_mask,
            cap=self.settings.behaviour_weight_cap,
            keep_range=self.settings.behaviour_weight_range,
        )
        return micro.advantages * weights, metrics

    def update_critic(self, batch: ExperienceBatch, plan: list[list[int]], old_values: torch.Tensor) -> dict[str, float]:
        totals: dict[str, float] = {}
        skipped = 0
        for _ in range(self.settings.ppo_epochs):
            self.critic_optimizer.zero_grad(set_to_none=True)
            for share, micro in self._micro_batches(batch, plan):
                rows = share.rows
                R = micro.response_length
                values = self.critic.response_values(micro, packed=self.settings.pack_sequences)
                loss, metrics = clipped_value_loss(
                    values=values,
                    old_values=old_values[rows, :R],
                    returns=micro.returns,
                    response_mask=micro.response_mask,
                    cliprange_value=self.settings.cliprange_value,
                    loss_agg_mode=self.settings.loss.loss_agg_mode,
                )
                weight = loss_scale(micro, batch, self.settings.loss.loss_agg_mode) if share.counts else 0.0
                (loss * (weight * self.parallel.gradient_scale)).backward()
                if not share.counts:
                    continue
                totals["critic/vf_loss"] = totals.get("critic/vf_loss", 0.0) + float(loss.detach()) * weight
                for key, value in metrics.items():
                    totals[f"critic/{key}"] = totals.get(f"critic/{key}", 0.0) + float(value) * weight
            _, skip = self._update("critic", self.critic, self.critic_optimizer, self.critic_scheduler)
            skipped += skip
        totals = self.parallel.sum_metrics(totals)
        totals[CRITIC_UPDATE_SKIPPED] = float(skipped)
        return totals

    def _micro_batches(
        self, batch: ExperienceBatch, plan: list[list[int]]
    ) -> Iterator[tuple[MicroBatchShare, ExperienceBatch]]:
        """This rank's micro-batches of ``batch`` by ``plan`` (``DataParallel.micro_batches``), each
        with its share: the rows, and whether they count or only join the other ranks' collectives."""
        for share in self.parallel.micro_batches(plan):
            yield share, batch.select(share.rows)

    def _update(
        self, name: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
    ) -> tuple[torch.Tensor, bool]:
        """Clip ``model``'s gradients and step ``optimizer``, unless their norm is not finite (the
        update is skipped, with a warning); ``scheduler`` steps either way. Returns the norm and
        whether the update was skipped."""
        norm = clip_gradients(model.parameters(), self.settings.grad_clip)
        skipped = not torch.isfinite(norm)
        if skipped:
            self.logger.warning("non-finite %s grad norm %s at step %d; update skipped", name, norm, self.global_step)
        else:
            optimizer.step()
        scheduler.step()
        return norm, skipped

    # ------------------------------------------------------------------ version
    # (what a weight sync sends: weight_source.py; checkpoints: trainer_checkpoints.py)
    @property
    def model_version(self) -> int:
        return self.global_step


def start_ranks(settings: TrainerSettings, *, run_dir: str | Path, pad_token_id: int,
                launcher: RankLauncher | None = None) -> RankGroup:
    """Rank 0: start ranks 1..N-1 (local processes unless ``launcher`` says otherwise), each a
    ``Trainer`` following this one."""
    return RankGroup.start(
        world_size=settings.data_parallel_size,
        device_type="cuda" if settings.device.startswith("cuda") else "cpu",
        timeout=settings.collective_timeout,
        follower=follow_as_trainer,
        # The run's plugins (losses, advantages, ...) are imported in every rank's process.
        follower_args=(settings, str(run_dir), pad_token_id, loaded_plugin_dirs()),
        launcher=launcher,
    )


def follow_as_trainer(group: RankGroup, settings: TrainerSettings, run_dir: str, pad_token_id: int,
                      plugin_dirs: tuple[str, ...] = ()) -> None:
    """Ranks 1..N-1: build the same trainer, then run what rank 0 runs until it closes the group."""
    for directory in plugin_dirs:
        load_plugin_dir(directory)
    if settings.cpu_threads:
        torch.set_num_threads(settings.cpu_threads)
    trainer = Trainer(settings, run_dir=run_dir, pad_token_id=pad_token_id, rank_group=group)
    follow(trainer, group)
