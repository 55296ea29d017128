"""KL estimators, the reward penalty and the KL loss."""

import math

import pytest
import torch

from trivium.algorithm.kl import KL_FNS, apply_kl_penalty, kl_loss

LOGPROBS = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-1.5, -1.0]])  # d = log pi - log pi_ref = [0.5, -1.0]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("none", [0.0, 0.0]),
        ("k1", [0.5, -1.0]),
        ("abs", [0.5, 1.0]),
        ("k2", [0.5 * 0.5**2, 0.5 * 1.0**2]),
        # exp(-d) - 1 + d
        ("k3", [math.exp(-0.5) - 0.5, math.exp(1.0) - 2.0]),
        ("low_var_kl", [math.exp(-0.5) - 0.5, math.exp(1.0) - 2.0]),
    ],
)
def test_kl_estimators_match_their_formulas(name, expected):
    torch.testing.assert_close(KL_FNS.get(name)(LOGPROBS, REF), torch.tensor([expected]))


def test_low_var_kl_is_clamped_to_ten():
    # d = -15: k3 = e^15 - 16 (about 3.3e6) -> 10;  d = 50 (clamped to 20): e^-20 + 19 -> 10
    kl = KL_FNS.get("low_var_kl")(torch.tensor([[-15.0, 50.0]]), torch.tensor([[0.0, 0.0]]))
    assert kl.tolist() == [[10.0, 10.0]]


def test_verl_names_select_the_same_estimators_and_verl_k3_clamps_at_ten():
    torch.testing.assert_close(KL_FNS.get("kl")(LOGPROBS, REF), KL_FNS.get("k1")(LOGPROBS, REF))
    torch.testing.assert_close(KL_FNS.get("mse")(LOGPROBS, REF), KL_FNS.get("k2")(LOGPROBS, REF))
    # veRL's k3 (low_var_kl) clamps at 10; the plain k3 does not
    extreme = (torch.tensor([[-15.0]]), torch.tensor([[0.0]]))
    assert KL_FNS.get("low_var_kl")(*extreme).item() == 10.0
    assert KL_FNS.get("k3")(*extreme).item() == pytest.approx(math.exp(15.0) - 16.0, rel=1e-5)


@pytest.mark.parametrize("name", ["k1", "k2", "k3", "low_var_kl", "abs"])
def test_kl_estimators_stay_finite_for_extreme_log_ratios(name):
    logprobs = torch.tensor([[-60.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -60.0]])
    kl = KL_FNS.get(name)(logprobs, ref)
    kl.sum().backward()
    assert torch.isfinite(kl).all() and torch.isfinite(logprobs.grad).all()


def test_kl_penalty_is_subtracted_from_rewards_on_response_tokens_only():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    kl = torch.tensor([[0.1, 0.2, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    penalised, metrics = apply_kl_penalty(rewards, kl, mask, kl_coef=0.5)
    # r - 0.5 * kl on masked tokens: [-0.05, -0.1, 1]
    torch.testing.assert_close(penalised, torch.tensor([[-0.05, -0.1, 1.0]]))
    assert metrics["kl"] == pytest.approx(0.15)
    assert metrics["kl_coef"] == 0.5


def test_kl_loss_is_coef_times_aggregated_kl_with_gradient_only_into_the_policy():
    logprobs = LOGPROBS.clone().requires_grad_(True)
    ref = REF.clone().requires_grad_(True)
    loss, metrics = kl_loss(logprobs, ref, torch.ones(1, 2), kl_fn="k2", kl_coef=0.1)
    # k2 = [0.125, 0.5], token-mean 0.3125, times 0.1
    assert loss.item() == pytest.approx(0.03125)
    assert metrics["kl_loss"] == pytest.approx(0.3125)
    loss.backward()
    # d/dlogp of 0.1 * mean(d^2 / 2) = 0.1 * d / 2
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.025, -0.05]]))
    assert ref.grad is None


def test_kl_loss_none_and_empty_mask_give_zero():
    assert kl_loss(LOGPROBS, REF, torch.ones(1, 2), kl_fn="none")[0].item() == 0.0
    assert kl_loss(LOGPROBS, REF, torch.zeros(1, 2), kl_fn="k3")[0].item() == 0.0


def test_kl_loss_accepts_a_callable():
    loss, _ = kl_loss(LOGPROBS, REF, torch.ones(1, 2), kl_fn=lambda lp, ref: (lp - ref).abs(), kl_coef=1.0)
    assert loss.item() == pytest.approx(0.75)
