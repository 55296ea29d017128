"""Gradient accumulation must reproduce the gradient of one pass over the whole batch."""

import pytest
import torch

from trivium.core.batch import ExperienceBatch
from trivium.trainer.micro_batch import loss_scale, split_by_count, split_by_token_budget
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences


def _grads(trainer: Trainer, experiences, micro_batch_size: int, dynamic: bool = False, budget: int = 0):
    trainer.settings.micro_batch_size = micro_batch_size
    trainer.settings.use_dynamic_bsz = dynamic
    trainer.settings.max_token_len_per_gpu = budget
    batch = ExperienceBatch.from_experiences(experiences)
    trainer.actor.zero_grad()
    # Same update path as training, without the optimizer step.
    trainer.settings.grad_clip = 1e9
    lr = trainer.optimizer.param_groups[0]["lr"]
    trainer.optimizer.param_groups[0]["lr"] = 0.0
    trainer.update_policy(batch, trainer.plan(batch), None, None)
    trainer.optimizer.param_groups[0]["lr"] = lr
    # AdamW with lr 0 leaves weights untouched; gradients stay in .grad
    return torch.cat([p.grad.flatten() for p in trainer.actor.parameters() if p.grad is not None])


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_accumulated_gradient_equals_full_batch_gradient(tiny_model_dir, tmp_path, agg):
    settings = TrainerSettings(model_path=tiny_model_dir, loss=LossSettings(policy_loss_fn="ppo", loss_agg_mode=agg))
    trainer = Trainer(settings, run_dir=tmp_path)
    experiences = make_experiences()
    full = _grads(trainer, experiences, micro_batch_size=len(experiences))
    split = _grads(trainer, experiences, micro_batch_size=3)
    packed = _grads(trainer, experiences, micro_batch_size=0, dynamic=True, budget=24)
    assert full.abs().sum() > 0
    torch.testing.assert_close(split, full, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(packed, full, rtol=1e-4, atol=1e-6)


def test_token_budget_packing_respects_budget_and_keeps_every_row():
    batch = ExperienceBatch.from_experiences(make_experiences(num_groups=3, group_size=4))
    plan = split_by_token_budget(batch, max_tokens=30)
    assert sorted(row for group in plan for row in group) == list(range(batch.batch_size))
    lengths = batch.attention_mask.sum(dim=1)
    for group in plan:
        assert max(int(lengths[r]) for r in group) * len(group) <= 30 or len(group) == 1


def test_oversized_row_gets_its_own_micro_batch():
    batch = ExperienceBatch.from_experiences(make_experiences(num_groups=1, group_size=3))
    plan = split_by_token_budget(batch, max_tokens=2)
    assert all(len(group) == 1 for group in plan) and len(plan) == 3


def test_loss_scales_sum_to_one():
    batch = ExperienceBatch.from_experiences(make_experiences())
    for mode in ("token-mean", "seq-mean-token-mean"):
        total = sum(loss_scale(batch.select(rows), batch, mode) for rows in split_by_count(batch, 3))
        assert total == pytest.approx(1.0)
