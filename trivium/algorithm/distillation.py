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


def jsd_per_token(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, lambda_coef: float) -> torch.Tensor:
    """Per sampled token, the generalised JSD evaluated at that token alone.

    With s = log q (student) and t = log p (teacher) of the token and
    log m = logsumexp(log(1 - lambda) + s, log lambda + t):
    JSD_t = lambda * (t - log m) + (1 - lambda) * (s - log m); lambda = 0 gives s - t (a
    one-sample KL(student || teacher)), lambda = 1 gives t - s. Shapes: (B, R) in and out.
    """
    student = student_logprobs.float()
    teacher = teacher_logprobs.float()
    if lambda_coef == 0.0:
        # JSD_t = s - t
        return student - teacher
    if lambda_coef == 1.0:
        # JSD_t = t - s
        return teacher - student
    # log m = logsumexp(log(1 - lambda) + s, log lambda + t)
    log_mixture = torch.logaddexp(student + math.log1p(-lambda_coef), teacher + math.log(lambda_coef))
    # JSD_t = lambda * (t - log m) + (1 - lambda) * (s - log m)
    return lambda_coef * (teacher - log_mixture) + (1.0 - lambda_coef) * (student - log_mixture)


JSD_ADVANTAGES = ("divergence", "gradient")


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
    temperature: float = 1.0,
    chunk_size: int | None = None,
    advantage: str = "divergence",
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Jensen-Shannon distillation advantages from the student's and teacher's logprobs.

    ``advantage="divergence"`` (Trinity-RFT's): A_t = -kl_coef * JSD_t (``jsd_per_token``), a
    token the student finds likelier than the mixture gets a negative advantage.
    ``advantage="gradient"``: A_t = -kl_coef * (1 - lambda) * (s - log m), minus the token's
    weight in the exact policy gradient of the full JSD (``jsd_gradient_weight``; 0 for
    lambda 0 or 1). ``temperature`` divides both logprobs before either formula.
    ``chunk_size`` is accepted for Trinity-RFT configurations; it only bounds memory there,
    and per-token arithmetic here needs no chunks. Returns (advantages, returns), (B, R).
    """
    _require_teacher("jsd", old_logprobs, teacher_logprobs)
    if not 0.0 <= lambda_coef <= 1.0:
        raise ValueError(f"jsd advantage: lambda_coef must be in [0, 1], got {lambda_coef}")
    if temperature <= 0:
        raise ValueError(f"jsd advantage: temperature must be > 0, got {temperature}")
    if chunk_size is not None and chunk_size <= 0:
        raise ValueError(f"jsd advantage: chunk_size must be positive, got {chunk_size}")
    if advantage not in JSD_ADVANTAGES:
        raise ValueError(f"jsd advantage: advantage must be 'divergence' or 'gradient', got {advantage!r}")
    # s = log q / T, t = log p / T
    student = old_logprobs.float() / temperature
    teacher = teacher_logprobs.float() / temperature
    if advantage == "divergence":
        # A_t = -kl_coef * JSD_t
        per_token = -kl_coef * jsd_per_token(student, teacher, lambda_coef)
    else:
        # A_t = -kl_coef * (1 - lambda) * (s - log m)
        per_token = -kl_coef * jsd_gradient_weight(student, teacher, lambda_coef)
    advantages = per_token * response_mask.float()
    return advantages, advantages.clone()
