"""The decoupled objective in a real trainer step: each token's advantage times pi_prox / pi_engine."""

import pytest
import torch

from trivium.core.batch import ExperienceBatch
from trivium.trainer.forward import response_logprobs
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences


def _trainer(model_dir, run_dir, source, keep_range=None):
    settings = TrainerSettings(
        model_path=model_dir, lr=1e-3, micro_batch_size=4, old_logprobs_source=source, behaviour_weight_cap=5.0,
        behaviour_weight_range=keep_range, loss=LossSettings(policy_loss_fn="ppo"),
    )
    return Trainer(settings, run_dir=run_dir)


def test_decoupled_step_equals_ppo_with_advantages_times_the_weights(tiny_model_dir, tmp_path):
    decoupled = _trainer(tiny_model_dir, tmp_path / "d", "decoupled")
    reference = _trainer(tiny_model_dir, tmp_path / "r", "auto")
    experiences = make_experiences()
    with torch.no_grad():
        proximal = response_logprobs(decoupled.actor, ExperienceBatch.from_experiences(experiences))[0]
    # The engine sampled with another policy: its logprob of token t is log pi_prox - log c_t,
    # so w_t = c_t, with c_t in (0.5, 1.5, 2.5, 9 -> capped at 5).
    factors = torch.tensor([0.5, 1.5, 2.5, 9.0])
    weighted = []
    for row, exp in enumerate(experiences):
        R = exp.response_length
        c = factors.repeat(R)[:R]
        exp.logprobs = proximal[row, :R] - torch.log(c)
        twin = make_experiences()[row]
        twin.advantages = exp.advantages * torch.clamp(c, max=5.0)
        weighted.append(twin)
    metrics = decoupled.train_step(experiences)
    reference.train_step(weighted)
    for (name, a), b in zip(decoupled.actor.state_dict().items(), reference.actor.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert metrics["decoupled/weight_max"] == pytest.approx(5.0, rel=1e-4)
    assert 0 < metrics["decoupled/capped_frac"] < 0.5


def test_tokens_outside_the_kept_range_take_no_part_in_the_update(tiny_model_dir, tmp_path):
    masking = _trainer(tiny_model_dir, tmp_path / "m", "decoupled", keep_range=(0.6, 2.0))
    reference = _trainer(tiny_model_dir, tmp_path / "r", "auto")
    experiences = make_experiences()
    with torch.no_grad():
        proximal = response_logprobs(masking.actor, ExperienceBatch.from_experiences(experiences))[0]
    # w_t = c_t in (0.5, 1.5, 2.5, 9): 0.5, 2.5 and 9 fall outside [0.6, 2] and are masked.
    factors = torch.tensor([0.5, 1.5, 2.5, 9.0])
    kept = []
    for row, exp in enumerate(experiences):
        R = exp.response_length
        c = factors.repeat(R)[:R]
        exp.logprobs = proximal[row, :R] - torch.log(c)
        twin = make_experiences()[row]
        twin.advantages = exp.advantages * torch.where((c >= 0.6) & (c <= 2.0), c, torch.zeros_like(c))
        kept.append(twin)
    metrics = masking.train_step(experiences)
    reference.train_step(kept)
    for (name, a), b in zip(masking.actor.state_dict().items(), reference.actor.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert 0.5 < metrics["decoupled/masked_frac"] < 1 and metrics["decoupled/capped_frac"] == 0


def test_without_decoupling_the_engine_logprobs_do_not_weight_the_update(tiny_model_dir, tmp_path):
    plain = _trainer(tiny_model_dir, tmp_path / "p", "auto")
    other = _trainer(tiny_model_dir, tmp_path / "o", "auto")
    shifted = make_experiences()
    for exp in shifted:
        exp.logprobs = exp.logprobs - 1.0
    metrics = plain.train_step(make_experiences())
    other.train_step(shifted)
    assert not any(key.startswith("decoupled/") for key in metrics)
    for a, b in zip(plain.actor.state_dict().values(), other.actor.state_dict().values()):
        assert torch.equal(a, b)
