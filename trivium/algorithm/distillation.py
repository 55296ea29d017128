"""Distillation advantages: how far the student's sampled tokens are from a teacher's view.

The student samples a response; the teacher (an auxiliary model served by an inference
engine) scores the same tokens. Both estimators turn the two per-token log-probabilities
into per-token advantages, so that any policy loss (ppo, importance_sampling) moves the
student towards the teacher on its own samples (on-policy distillation). Signature::

    fn(*, token_level_rewards (B, R), response_mask (B, R), old_logprobs (B, R),
       teacher_logprobs (B, R), **args) -> (advantages (B, R), returns (B, R))

``old_logprobs`` are the student's logprobs of the sampled tokens when it sampled them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trivium.algorithm.advantages import register_advantage_fn
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


def _require_teacher(estimator: str, old_logprobs: torch.Tensor | None, teacher_logprobs: torch.Tensor | None) -> None:
    if teacher_logprobs is None or old_logprobs is None:
        raise ValueError(
            f"advantage_fn '{estimator}' needs old_logprobs and teacher_logprobs (B, R): the student's and "
            "the teacher's logprobs of the sampled tokens; set an auxiliary teacher model"
        )


@register_advantage_fn("on_policy_distill", in_trainer=True, needs_teacher=True)
@no_grad
def on_policy_distill_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    old_logprobs: torch.Tensor | None = None,
    teacher_logprobs: torch.Tensor | None = None,
    kl_coef: float = 1.0,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Negative reverse KL per token: a token the teacher finds likelier gets a positive advantage.

    Summed over a response, -(log pi_student - log pi_teacher) is a one-sample estimate of
    -KL(student || teacher); the policy gradient with this advantage minimises that KL.
    The reward is not used. Returns (advantages, returns), both (B, R) and equal.
    """
    _require_teacher("on_policy_distill", old_logprobs, teacher_logprobs)
    mask = response_mask.float()
    # A_t = kl_coef * (log pi_teacher(y_t) - log pi_student(y_t))
    advantages = kl_coef * (teacher_logprobs.float() - old_logprobs.float()) * mask
    return advantages, advantages.clone()


def jsd_gradient_weight(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, lambda_coef: float) -> torch.Tensor:
    """Per sampled token, the weight of its score in the gradient of the generalised Jensen-Shannon divergence.

    With p = teacher, q = student and m = lambda * p + (1 - lambda) * q, the divergence is
    JSD = sum_y [lambda p log(p/m) + (1 - lambda) q log(q/m)]. Its derivative in q_y is
    (1 - lambda) log(q_y/m_y) (the other terms cancel), so
    grad JSD = E_{y~q} [(1 - lambda) log(q_y/m_y) grad log q_y]: a policy gradient whose
    advantage is minus this weight descends the JSD on the student's own samples, exactly in
    expectation. lambda = 0 or 1 makes m equal one side and the divergence 0.
    Shapes: (B, R) in, (B, R) out.
    """
    if lambda_coef <= 0.0 or lambda_coef >= 1.0:
        return torch.zeros_like(student_logprobs, dtype=torch.float32)
    student = student_logprobs.float()
    teacher = teacher_logprobs.float()
    # log m = logsumexp(log lambda + log p, log(1 - lambda) + log q)
    log_mixture = torch.logaddexp(teacher + math.log(lambda_coef), student + math.log(1.0 - lambda_coef))
    # w_t = (1 - lambda) * (log q - log m)
    return (1.0 - lambda_coef) * (student - log_mixture)


@register_advantage_fn("jsd", in_trainer=True, needs_teacher=True)
@no_grad
def jsd_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    old_logprobs: torch.Tensor | None = None,
    teacher_logprobs: torch.Tensor | None = None,
    kl_coef: float = 1.0,
    lambda_coef: float = 0.5,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Minus the JSD gradient weight of each sampled token, scaled by kl_coef.

    A symmetric, bounded alternative to on_policy_distill: a token the student finds likelier
    than the mixture of the two models gets a negative advantage, one it finds less likely a
    positive one. ``lambda_coef`` weighs the teacher's side of the mixture (0.5 is the
    symmetric divergence). Returns (advantages, returns), both (B, R) and equal.
    """
    _require_teacher("jsd", old_logprobs, teacher_logprobs)
    if not 0.0 <= lambda_coef <= 1.0:
        raise ValueError(f"jsd advantage: lambda_coef must be in [0, 1], got {lambda_coef}")
    # A_t = -kl_coef * (1 - lambda) * (log q(y_t) - log m(y_t))
    advantages = -kl_coef * jsd_gradient_weight(old_logprobs, teacher_logprobs, lambda_coef) * response_mask.float()
    return advantages, advantages.clone()
