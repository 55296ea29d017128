"""Optimizer and learning-rate schedule for the actor and the critic."""

from __future__ import annotations

import math

import torch


def build_optimizer(
    params, *, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
) -> torch.optim.AdamW:
    trainable = [p for p in params if p.requires_grad]
    # foreach=True keeps the step to a few fused kernels; tiny models are overhead-bound.
    return torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, betas=tuple(betas), eps=eps, foreach=True)


def lr_lambda(
    *,
    scheduler_type: str,
    total_steps: int | None,
    warmup_ratio: float,
    min_lr_ratio: float = 0.0,
    warmup_steps: int | None = None,
):
    """Multiplier of the base lr at a given optimizer step (0-based)."""
    total = max(int(total_steps or 0), 0)
    warmup = int(warmup_steps) if warmup_steps is not None else (int(warmup_ratio * total) if total else 0)

    def multiplier(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if scheduler_type == "cosine" and total > warmup:
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
            return min_lr_ratio + (1.0 - min_lr_ratio) * cosine
        return 1.0

    return multiplier


def build_scheduler(optimizer, **schedule) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(**schedule))
