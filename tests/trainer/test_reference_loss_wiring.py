"""The trainer's use of the reference-aligned algorithm traits: a loss's own aggregation, the
clipb/clipv mask, the adaptive KL penalty and the sampling logprobs of corrected_k3."""

import pytest
import torch

from trivium.core.batch import ExperienceBatch
from trivium.trainer.forward import response_logprobs
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences
from .test_micro_batching import _grads


@pytest.mark.parametrize("loss", [
    # rec aggregates over tokens whatever loss_agg_mode says: micro-batches weigh by tokens
    {"policy_loss_fn": "rec", "loss_agg_mode": "seq-mean-token-sum"},
    {"policy_loss_fn": "ppo", "loss_agg_mode": "seq-mean-token-sum-norm"},
    {"policy_loss_fn": "ppo", "loss_agg_mode": "seq-mean-token-mean-nonempty"},
])
def test_accumulated_gradient_equals_the_full_batch_gradient(tiny_model_dir, tmp_path, loss):
    trainer = Trainer(TrainerSettings(model_path=tiny_model_dir, loss=LossSettings(**loss)), run_dir=tmp_path)
    experiences = make_experiences()
    full = _grads(trainer, experiences, micro_batch_size=len(experiences))
    split = _grads(trainer, experiences, micro_batch_size=3)
    assert full.abs().sum() > 0
    torch.testing.assert_close(split, full, rtol=1e-4, atol=1e-6)


def _without_advantages(experiences):
    for exp in experiences:
        exp.advantages = None
    return experiences


def test_clipb_narrows_the_response_mask_every_loss_term_uses(tiny_model_dir, tmp_path):
    loss = LossSettings(policy_loss_fn="ppo", advantage_fn="clipb", advantage_fn_args={"mu": 0.5})
    trainer = Trainer(TrainerSettings(model_path=tiny_model_dir, loss=loss), run_dir=tmp_path)
    experiences = _without_advantages(make_experiences())
    batch = ExperienceBatch.from_experiences(experiences)
    before = batch.response_mask.clone()
    trainer.compute_advantages(batch, experiences, None, None)
    dropped = (before > 0) & (batch.response_mask == 0)
    # mu = 0.5 drops some negative-advantage tokens, and only those
    assert dropped.any()
    assert (batch.advantages[dropped] < 0).all()
    torch.testing.assert_close(batch.response_mask, before * (~dropped).float())


def test_adaptive_kl_penalty_moves_its_coefficient_after_each_step(tiny_model_dir, tmp_path):
    loss = LossSettings(policy_loss_fn="ppo", advantage_fn="grpo_verl", kl_penalty_fn="k1", kl_penalty_coef=0.1,
                        kl_penalty_adaptive=True, kl_penalty_target=0.1, kl_penalty_horizon=100.0)
    trainer = Trainer(TrainerSettings(model_path=tiny_model_dir, loss=loss), run_dir=tmp_path)
    experiences = _without_advantages(make_experiences())
    batch = ExperienceBatch.from_experiences(experiences)
    with torch.no_grad():
        current, _ = response_logprobs(trainer.actor, batch)
    # k1 = log pi - log pi_ref = 0.5 on every token: KL 0.5 against target 0.1 -> error clip(4, -0.2, 0.2) = 0.2;
    # eight rows, horizon 100: 0.1 * (1 + 0.2 * 8 / 100) = 0.1016
    metrics = trainer.compute_advantages(batch, experiences, None, current - 0.5)
    assert metrics["kl"] == pytest.approx(0.5, abs=1e-5)
    assert metrics["kl_coef"] == pytest.approx(0.1)
    assert trainer.kl_penalty_coef == pytest.approx(0.1016)
