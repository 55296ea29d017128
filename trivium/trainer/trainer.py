"""The PyTorch trainer: one ``train_step`` turns a batch of experiences into one update.

    train_step = build_batch -> compute_reference -> compute_values -> compute_advantages
                 -> update_policy -> update_critic

The loss math lives in ``trivium.algorithm``; this module only moves tensors, accumulates
gradients over micro-batches, steps optimizers and keeps checkpoints.

With ``data_parallel_size`` N > 1 the models are sharded with FSDP2 over N ranks (or, with
the ``ddp`` strategy, replicated on each, gradients all-reduced): this
object is rank 0, which starts the others (``rank_group.py``: local processes, or Ray actors
when Ray places the run); each rank runs its share of
every batch's micro-batches (``data_parallel.py``) and the update equals one process's.
"""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from trivium.algorithm.advantages import (
    ADVANTAGE_FNS,
    requires_entropy,
    requires_episodes,
    requires_teacher,
    response_mask_filter,
)
from trivium.algorithm.aggregation import masked_mean
from trivium.algorithm.decoupled import behaviour_importance_weights
from trivium.trainer.token_head import logit_chunk_tokens
from trivium.algorithm.entropy import ENTROPY_LOSS_FNS
from trivium.algorithm.kl import KL_FNS, adaptive_kl_coef, apply_kl_penalty, kl_loss
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, effective_loss_agg_mode, needs_expert_mask, pairs_rows
from trivium.algorithm.value_loss import clipped_value_loss
from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience, episode_index
from trivium.errors import UserError
from trivium.models.lora_delta import is_adapter_dir
from trivium.models.model_dir import check_model_dir
from trivium.models.rope import rope_config_overrides
from trivium.monitor.metric_names import CRITIC_UPDATE_SKIPPED, UPDATE_SKIPPED
from trivium.registry import load_plugin_dir, loaded_plugin_dirs
from trivium.trainer import checkpoint as ckpt
from trivium.trainer import lora
from trivium.trainer.critic import CriticModel
from trivium.trainer.data_parallel import DataParallel
from trivium.trainer.forward import response_logprobs, whole_batch_entropy_terms, whole_batch_logprobs
from trivium.trainer.fsdp import clip_gradients, shard_model
from trivium.trainer.micro_batch import loss_scale, plan_micro_batches
from trivium.trainer.optim import build_optimizer, build_scheduler
from trivium.trainer.packed_attention import use_packed_attention
from trivium.trainer.packing import PACKED_MODEL_TYPES, packs
from trivium.trainer.rank_group import RankGroup, RankLauncher, follow, on_every_rank
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.sharded_checkpoint import (
    SHARDED_DIR,
    full_model_state,
    is_sharded_save,
    load_full_model_state,
    load_sharded,
    load_unsharded_optimizer_state,
    save_sharded,
)
from trivium.trainer.weight_source import WeightSource

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.float32}


def load_causal_lm(path: str, dtype: str = "float32", trainable: bool = True, device: str = "cpu",
                   key: str = "model.model_path", packed: bool = False,
                   config_overrides: dict[str, Any] | None = None) -> torch.nn.Module:
    """``packed``: the model will also run packed micro-batches (trainer/packing.py);
    ``config_overrides``: config attributes set over the model's config.json (models/rope.py)."""
    check_model_dir(path, key=key)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=DTYPES.get(dtype, torch.float32), **(config_overrides or {})
        ).to(device)
    except (OSError, ValueError) as error:
        raise UserError(f"Cannot load the model in {key}={path!r}: {error}") from error
    model.config.use_cache = False
    if packed:
        use_packed_attention(model)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model


class Trainer(WeightSource):
    def __init__(
        self,
        settings: TrainerSettings,
        *,
        run_dir: str | Path,
        tokenizer: Any = None,
        pad_token_id: int = 0,
        logger: logging.Logger | None = None,
        rank_group: RankGroup | None = None,
        rank_launcher: RankLauncher | None = None,
    ):
        # Rank 0 starts the other ranks first: they load their models while it loads its own.
        if rank_group is None and settings.data_parallel_size > 1:
            rank_group = start_ranks(settings, run_dir=run_dir, pad_token_id=pad_token_id, launcher=rank_launcher)
        self.rank_group = rank_group
        self.parallel = DataParallel(rank=rank_group.rank, world_size=rank_group.world_size) if rank_group else DataParallel()
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.tokenizer = tokenizer
        self.pad_token_id = pad_token_id
        self.logger = logger or logging.getLogger("trivium.trainer")
        self.global_step = 0
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
        settings, device = self.settings, str(self.device)
        overrides = rope_config_overrides(
            settings.model_path, rope_scaling=settings.rope_scaling, rope_theta=settings.rope_theta
        )
        self.actor = load_causal_lm(
            settings.model_path, settings.dtype, device=device, packed=settings.pack_sequences, config_overrides=overrides
        )
        if settings.lora is not None:
            self.actor = lora.wrap_with_lora(self.actor, settings.lora)
            # A new adapter's A is random: the ranks shard rank 0's, as one process would train it.
            self.parallel.copy_from_first_rank(lora.adapter_parameters(self.actor))
        if settings.gradient_checkpointing:
            # Non-reentrant (transformers' default, stated because FSDP2 needs it): the recomputation
            # runs inside FSDP2's hooks, which gather the sharded parameters again.
            self.actor.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if settings.lora is not None:
                self.actor.enable_input_require_grads()  # frozen embeddings: checkpointed blocks still need grads
        self.actor.train()
        if settings.pack_sequences and not packs(self.actor):
            raise UserError(
                f"trainer.use_remove_padding: packed micro-batches are implemented for {', '.join(PACKED_MODEL_TYPES)} "
                f"models; {settings.model_path} is a {self.actor.config.model_type!r} model. Set it to false"
            )
        # Under LoRA the reference is the actor with its adapter switched off: no second copy.
        self.reference = (
            load_causal_lm(
                settings.model_path, settings.dtype, trainable=False, device=device, packed=settings.pack_sequences,
                config_overrides=overrides,
            )
            if settings.loss.needs_reference and settings.lora is None
            else None
        )
        self._shard(self.actor, self.reference)
        schedule = dict(
            scheduler_type=settings.lr_scheduler_type,
            total_steps=settings.total_steps,
            warmup_ratio=settings.lr_warmup_steps_ratio,
            warmup_steps=settings.lr_warmup_steps,
            min_lr_ratio=settings.min_lr_ratio,
        )
        self.optimizer = build_optimizer(
            self.actor.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, betas=settings.betas
        )
        self.scheduler = build_scheduler(self.optimizer, **schedule)
        self.critic = self.critic_optimizer = self.critic_scheduler = None
        if settings.use_critic:
            critic_key = "model.critic_model_path" if settings.critic_model_path else "model.model_path"
            critic_path = check_model_dir(settings.critic_model_path or settings.model_path, key=critic_key)
            # The rope overrides are the trained model's: a critic of its own keeps its config.
            critic_overrides = {} if settings.critic_model_path else overrides
            self.critic = CriticModel.from_pretrained(str(critic_path), config_overrides=critic_overrides).to(self.device)
            if settings.pack_sequences:
                use_packed_attention(self.critic.trunk)
            self.critic.train()
            self._shard(self.critic)
            self.critic_optimizer = build_optimizer(
                self.critic.parameters(), lr=settings.critic_lr, weight_decay=settings.weight_decay
            )
            self.critic_scheduler = build_scheduler(self.critic_optimizer, **schedule)

    def _shard(self, *models: torch.nn.Module | None) -> None:
        """FSDP2 over the ranks, or replicas for ``ddp`` (before the optimizers are built: they hold the shards)."""
        if not self.parallel.sharded:
            return
        for model in models:
            if model is not None:
                shard_model(
                    model,
                    device_type=self.device.type,
                    world_size=self.parallel.world_size,
                    replicate=self.settings.strategy == "ddp",
                    offload_params=self.settings.param_offload,
                )

    def close(self) -> None:
        """Rank 0: stop the other ranks and leave the process group (nothing to do on one rank)."""
        if self.rank_group is not None and self.rank_group.leads:
            self.rank_group.close()

    # ------------------------------------------------------------------ the step
    @on_every_rank
    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        start = time.perf_counter()
        experiences, stale_metrics = self.apply_staleness_control(experiences)
        if not experiences:
            return {"trainer/skipped_empty_batch": 1.0, **stale_metrics}
        batch = ExperienceBatch.from_experiences(
            experiences, self.pad_token_id, train_truncated_episodes=self.settings.truncation == "keep"
        ).to(self.device)
        plan = self.plan(batch)
        metrics: dict[str, float] = dict(stale_metrics)

        ref_logprobs = self.compute_reference(batch, plan) if self.settings.loss.needs_reference else None
        values = self.compute_values(batch, plan) if self.critic is not None else None
        metrics.update(self.compute_advantages(batch, experiences, values, ref_logprobs))

        old_logprobs = self.compute_old_logprobs(batch, plan)
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
        """Which exact forwards a micro-batch may run (trainer/forward.py picks the cheapest), and
        how many positions the head computes at a time."""
        return {
            "share_prompts": self.share_prompts,
            "pack_sequences": self.settings.pack_sequences,
            "chunk_tokens": logit_chunk_tokens(self.settings.logit_chunk_tokens, self.actor),
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
        staleness = [self.global_step - e.model_version for e in experiences]
        metrics = {
            "staleness/mean": sum(staleness) / max(1, len(staleness)),
            "staleness/max": float(max(staleness, default=0)),
        }
        limit = self.settings.staleness_limit
        if limit is None:
            return experiences, metrics
        if self.settings.staleness_mode == "drop":
            kept = [e for e, s in zip(experiences, staleness) if s <= limit]
            metrics["staleness/dropped"] = float(len(experiences) - len(kept))
            return kept, metrics
        for exp, s in zip(experiences, staleness):
            if s > limit and exp.advantages is not None:
                # Older than the bound: shrink its say in the update instead of dropping it.
                exp.advantages = exp.advantages / (1 + s - limit)
        return experiences, metrics

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
            for share in self.parallel.micro_batches(plan):
                micro = batch.select(share.rows)
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
        if loss.advantage_fn == "none" or all(e.advantages is not None for e in experiences):
            return metrics
        token_rewards = torch.zeros_like(batch.response_mask)
        lengths = batch.attention_mask[:, batch.prompt_length :].sum(dim=1)
        rows = torch.arange(batch.batch_size, device=self.device)
        token_rewards[rows, (lengths - 1).clamp(min=0)] = batch.rewards
        if ref_logprobs is not None and loss.kl_penalty_fn != "none" and loss.kl_penalty_coef > 0:
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

    def compute_old_logprobs(self, batch: ExperienceBatch, plan: list[list[int]]) -> torch.Tensor | None:
        source = self.settings.old_logprobs_source
        if source == "engine":
            return batch.old_logprobs
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
        loss_cfg = self.settings.loss
        policy_loss_fn = POLICY_LOSS_FNS.get(loss_cfg.policy_loss_fn)
        entropy_loss_fn = ENTROPY_LOSS_FNS.get(loss_cfg.entropy_loss_fn)
        takes_global_step = _accepts(policy_loss_fn, "global_step")
        # A loss may fix its own aggregation (rec); its micro-batches are weighted by that one.
        pg_agg_mode = effective_loss_agg_mode(policy_loss_fn, loss_cfg.policy_loss_fn_args, loss_cfg.loss_agg_mode)
        # The full-vocabulary entropy costs a pass over the logits; skip it when it has no weight.
        want_entropy = loss_cfg.entropy_loss_fn != "none" and loss_cfg.entropy_coef != 0
        use_kl_loss = ref_logprobs is not None and loss_cfg.kl_loss_fn != "none" and loss_cfg.kl_loss_coef > 0
        totals: dict[str, float] = {}
        grad_norm = torch.tensor(0.0)
        skipped = 0  # optimizer steps left out: non-finite gradients
        for _ in range(self.settings.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for share in self.parallel.micro_batches(plan):
                rows = share.rows
                micro = batch.select(rows)
                R = micro.response_length
                logprobs, entropy = response_logprobs(self.actor, micro, with_entropy=want_entropy, **self.forward_options)
                old = logprobs.detach() if old_logprobs is None else old_logprobs[rows, :R]
                advantages, weight_metrics = self.decoupled_advantages(micro, old)
                extra: dict[str, Any] = {}
                if ref_logprobs is not None:
                    extra["ref_logprobs"] = ref_logprobs[rows, :R]
                if needs_expert_mask(policy_loss_fn):
                    extra["expert_mask"] = micro.expert_mask
                if takes_global_step:
                    extra["global_step"] = self.global_step
                pg_loss, pg_metrics = policy_loss_fn(
                    logprobs=logprobs,
                    old_logprobs=old,
                    advantages=advantages,
                    response_mask=micro.response_mask,
                    loss_agg_mode=loss_cfg.loss_agg_mode,
                    **extra,
                    **loss_cfg.policy_loss_fn_args,
                )
                step_metrics = {f"actor/{k}": float(v) for k, v in pg_metrics.items()}
                step_metrics["actor/pg_loss"] = float(pg_loss.detach())
                step_metrics.update({f"decoupled/{k}": v for k, v in weight_metrics.items()})
                total = torch.zeros((), device=pg_loss.device)  # the KL and entropy terms
                if use_kl_loss:
                    kl_value, kl_metrics = kl_loss(
                        logprobs,
                        ref_logprobs[rows, :R],
                        micro.response_mask,
                        kl_fn=loss_cfg.kl_loss_fn,
                        kl_coef=loss_cfg.kl_loss_coef,
                        loss_agg_mode=loss_cfg.loss_agg_mode,
                        old_logprobs=old,
                    )
                    total = total + kl_value
                    step_metrics.update({f"actor/{k}": float(v) for k, v in kl_metrics.items()})
                if entropy is not None:
                    ent_extra = {"expert_mask": micro.expert_mask} if needs_expert_mask(entropy_loss_fn) else {}
                    ent_loss, ent_metrics = entropy_loss_fn(
                        entropy=entropy,
                        response_mask=micro.response_mask,
                        **ent_extra,
                        entropy_coef=loss_cfg.entropy_coef,
                        loss_agg_mode=loss_cfg.loss_agg_mode,
                    )
                    total = total + ent_loss
                    step_metrics.update({f"actor/{k}": float(v) for k, v in ent_metrics.items()})
                elif self.learns_from_rollouts and micro.response_mask.any():
                    # The mean surprisal of on-policy samples estimates the entropy for free.
                    step_metrics["actor/entropy"] = float(-masked_mean(logprobs.detach(), micro.response_mask))
                weight = loss_scale(micro, batch, loss_cfg.loss_agg_mode) if share.counts else 0.0
                # the policy loss weighs by its own aggregation's share (rec may fix it), the rest by loss_agg_mode
                pg_weight = loss_scale(micro, batch, pg_agg_mode) if share.counts else 0.0
                ((pg_loss * pg_weight + total * weight) * self.parallel.gradient_scale).backward()
                if share.counts:
                    for key, value in step_metrics.items():
                        totals[key] = totals.get(key, 0.0) + value * weight / self.settings.ppo_epochs
            grad_norm = clip_gradients(self.actor.parameters(), self.settings.grad_clip)
            if torch.isfinite(grad_norm):
                self.optimizer.step()
            else:
                skipped += 1
                self.logger.warning("non-finite actor grad norm %s at step %d; update skipped", grad_norm, self.global_step)
            self.scheduler.step()
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
            for share in self.parallel.micro_batches(plan):
                rows = share.rows
                micro = batch.select(rows)
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
            norm = clip_gradients(self.critic.parameters(), self.settings.grad_clip)
            if torch.isfinite(norm):
                self.critic_optimizer.step()
            else:
                skipped += 1
                self.logger.warning("non-finite critic grad norm %s at step %d; update skipped", norm, self.global_step)
            self.critic_scheduler.step()
        totals = self.parallel.sum_metrics(totals)
        totals[CRITIC_UPDATE_SKIPPED] = float(skipped)
        return totals

    # ------------------------------------------------------------------ version and checkpoints
    # (what a weight sync sends: weight_source.py)
    @property
    def model_version(self) -> int:
        return self.global_step

    @on_every_rank
    def save_checkpoint(self, *, export_hf: bool, extra_files: dict[str, dict] | None = None) -> Path:
        if self.parallel.sharded:
            return self._save_sharded_checkpoint(export_hf=export_hf, extra_files=extra_files)
        return ckpt.save_checkpoint(
            self.run_dir,
            self.global_step,
            actor=self.actor,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            trainer_state={"model_version": self.model_version},
            tokenizer=self.tokenizer,
            export_hf=export_hf,
            export_model=lora.merged_copy(self.actor) if export_hf and self.settings.lora is not None else None,
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
            trainer_state={"model_version": self.model_version, "data_parallel_size": self.parallel.world_size},
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
                self._load_whole_weights(self.critic, CriticModel.from_pretrained(str(critic_dir)).state_dict())
                critic_state = ckpt.load_optimizer_state(self.run_dir, step, "critic")["optimizer"]
                self._load_unsharded_optimizer(self.critic, self.critic_optimizer, critic_state)
        self.global_step = int(ckpt.load_trainer_state(self.run_dir, step)["global_step"])

    def _load_whole_weights(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        if self.parallel.sharded:
            load_full_model_state(model, state)
        else:
            model.load_state_dict(state)

    def _load_unsharded_optimizer(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
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


def _accepts(fn: Any, name: str) -> bool:
    """True if ``fn`` has a parameter called ``name`` (plugins may not take every input)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
