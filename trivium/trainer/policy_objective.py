"""The actor's objective on one micro-batch, given the logprobs of its response tokens.

Shared by the local trainer (logprobs from its own forward pass) and the Tinker trainer
(logprobs from the service's forward pass): the policy loss, the KL loss against the
reference and the entropy term, each from ``trivium.algorithm``, with their metrics.
The caller weighs the two returned parts by each one's share of the whole batch
(``micro_batch.loss_scale``): the policy loss by its own aggregation (a loss may fix it),
the rest by ``loss_agg_mode``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from trivium.algorithm.aggregation import masked_mean
from trivium.algorithm.entropy import ENTROPY_LOSS_FNS
from trivium.algorithm.kl import kl_loss
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, effective_loss_agg_mode, needs_expert_mask
from trivium.core.batch import ExperienceBatch
from trivium.trainer.settings import LossSettings


@dataclass
class ObjectiveTerms:
    policy_loss: torch.Tensor  # aggregated by ``policy_agg_mode``
    other_terms: torch.Tensor  # KL and entropy, aggregated by ``loss_agg_mode``
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyObjective:
    """The configured loss functions, looked up once."""

    settings: LossSettings
    learns_from_rollouts: bool = True

    @property
    def policy_loss_fn(self) -> Any:
        return POLICY_LOSS_FNS.get(self.settings.policy_loss_fn)

    @property
    def entropy_loss_fn(self) -> Any:
        return ENTROPY_LOSS_FNS.get(self.settings.entropy_loss_fn)

    @property
    def policy_agg_mode(self) -> str:
        """The aggregation the policy loss uses (``rec`` fixes its own)."""
        return effective_loss_agg_mode(
            self.policy_loss_fn, self.settings.policy_loss_fn_args, self.settings.loss_agg_mode
        )

    @property
    def wants_entropy(self) -> bool:
        """The full-vocabulary entropy costs a pass over the logits: only when it has a weight."""
        return self.settings.entropy_loss_fn is not None and self.settings.entropy_coef != 0

    def uses_kl_loss(self, ref_logprobs: torch.Tensor | None) -> bool:
        return (
            ref_logprobs is not None and self.settings.kl_loss_fn is not None and self.settings.kl_loss_coef > 0
        )

    def terms(
        self,
        micro: ExperienceBatch,
        *,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        entropy: torch.Tensor | None = None,
        ref_logprobs: torch.Tensor | None = None,
        global_step: int = 0,
    ) -> ObjectiveTerms:
        """The micro-batch's loss terms; every (B, R) tensor is on ``micro``'s response grid."""
        cfg = self.settings
        policy_loss_fn = self.policy_loss_fn
        extra: dict[str, Any] = {}
        if ref_logprobs is not None:
            extra["ref_logprobs"] = ref_logprobs
        if needs_expert_mask(policy_loss_fn):
            extra["expert_mask"] = micro.expert_mask
        if _accepts(policy_loss_fn, "global_step"):
            extra["global_step"] = global_step
        pg_loss, pg_metrics = policy_loss_fn(
            logprobs=logprobs,
            old_logprobs=old_logprobs,
            advantages=advantages,
            response_mask=micro.response_mask,
            loss_agg_mode=cfg.loss_agg_mode,
            **extra,
            **cfg.policy_loss_fn_args,
        )
        metrics = {f"actor/{k}": float(v) for k, v in pg_metrics.items()}
        metrics["actor/pg_loss"] = float(pg_loss.detach())
        other = self._kl_and_entropy(micro, logprobs, old_logprobs, entropy, ref_logprobs, metrics)
        return ObjectiveTerms(pg_loss, other, metrics)

    def _kl_and_entropy(
        self,
        micro: ExperienceBatch,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        entropy: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
        metrics: dict[str, float],
    ) -> torch.Tensor:
        """The KL loss and the entropy term, summed; their metrics go into ``metrics``."""
        cfg = self.settings
        other = torch.zeros((), device=logprobs.device)
        if self.uses_kl_loss(ref_logprobs):
            kl_value, kl_metrics = kl_loss(
                logprobs,
                ref_logprobs,
                micro.response_mask,
                kl_fn=cfg.kl_loss_fn,
                kl_coef=cfg.kl_loss_coef,
                loss_agg_mode=cfg.loss_agg_mode,
                old_logprobs=old_logprobs,
            )
            other = other + kl_value
            metrics.update({f"actor/{k}": float(v) for k, v in kl_metrics.items()})
        if entropy is not None:
            entropy_loss_fn = self.entropy_loss_fn
            ent_extra = {"expert_mask": micro.expert_mask} if needs_expert_mask(entropy_loss_fn) else {}
            ent_loss, ent_metrics = entropy_loss_fn(
                entropy=entropy,
                response_mask=micro.response_mask,
                **ent_extra,
                entropy_coef=cfg.entropy_coef,
                loss_agg_mode=cfg.loss_agg_mode,
            )
            other = other + ent_loss
            metrics.update({f"actor/{k}": float(v) for k, v in ent_metrics.items()})
        elif self.learns_from_rollouts and micro.response_mask.any():
            # The mean surprisal of on-policy samples estimates the entropy for free.
            metrics["actor/entropy"] = float(-masked_mean(logprobs.detach(), micro.response_mask))
        return other


def _accepts(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
