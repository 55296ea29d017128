"""importance_sampling, topr, sapo, sppo, rec, raft and the CHORD losses against hand-computed numbers."""

import math

import pytest
import torch

from trivium.algorithm.chord import mu_schedule
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, needs_expert_mask



def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def with_ratios(logprobs, ratios):
    """old_logprobs such that exp(logprobs - old_logprobs) = ratios."""
    return logprobs.detach() - torch.log(torch.tensor(ratios))


def loss_fn(name):
    return POLICY_LOSS_FNS.get(name)


def test_importance_sampling_is_ratio_times_advantage():
    logprobs = leaf([[-1.0, -1.0]])
    old = with_ratios(logprobs, [[2.0, 0.5]])
    loss, metrics = loss_fn("importance_sampling")(
        logprobs=logprobs, old_logprobs=old, advantages=torch.tensor([[1.0, -2.0]]), response_mask=torch.ones(1, 2)
    )
    # (-2 * 1 + -0.5 * -2) / 2 = -0.5
    assert loss.item() == pytest.approx(-0.5)
    assert metrics["ratio_mean"] == pytest.approx(1.25)
    loss.backward()
    # d/dlogpi (-r A) = -r A, over 2 tokens
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, 0.5]]))


def test_topr_truncates_the_ratio_of_negative_samples_only():
    logprobs = leaf([[-1.0, -1.0, -1.0]])
    old = with_ratios(logprobs, [[3.0, 3.0, 0.5]])
    advantages = torch.tensor([[1.0, -1.0, -1.0]])
    loss, metrics = loss_fn("topr")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(1, 3)
    )
    # alpha = [1, clip(3) = 1, 0.5]; L = -alpha * A * log pi = [1, -1, -0.5] ... / 3
    assert loss.item() == pytest.approx((1.0 - 1.0 - 0.5) / 3)
    assert metrics["topr_alpha_mean"] == pytest.approx(2.5 / 3)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, 1.0, 0.5]]) / 3)


def test_sapo_gate_has_unit_slope_at_ratio_one_and_fades_away_from_it():
    logprobs = leaf([[-1.0, -1.0]])
    old = with_ratios(logprobs, [[1.0, 3.0]])
    advantages = torch.tensor([[1.0, 1.0]])
    loss, _ = loss_fn("sapo")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(1, 2),
        loss_agg_mode="seq-mean-token-sum", surrogate=True,
    )
    # the surrogate L = -(4 / tau) * sigmoid(tau * (r - 1)) with tau = 1: r = 1 -> -2; r = 3 -> -4 * sigmoid(2)
    sig2 = 1 / (1 + math.exp(-2.0))
    assert loss.item() == pytest.approx(-2.0 - 4 * sig2, rel=1e-6)
    loss.backward()
    # dL/dlog pi = -A * 4 * s * (1 - s) * r: 1 at r = 1; 4 * s2 * (1 - s2) * 3 at r = 3
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, -12 * sig2 * (1 - sig2)]]))


def test_sapo_uses_the_negative_temperature_for_negative_advantages():
    logprobs = leaf([[-1.0]])
    old = with_ratios(logprobs, [[2.0]])
    loss, _ = loss_fn("sapo")(
        logprobs=logprobs, old_logprobs=old, advantages=torch.tensor([[-1.0]]), response_mask=torch.ones(1, 1),
        tau_pos=1.0, tau_neg=2.0, surrogate=True,
    )
    # L = +(4 / 2) * sigmoid(2 * 1)
    assert loss.item() == pytest.approx(2 / (1 + math.exp(-2.0)), rel=1e-6)


def test_sppo_is_a_clipped_log_ratio_surrogate():
    logprobs = leaf([[-1.0, -1.0, -1.0]])
    old = with_ratios(logprobs, [[1.05, 1.5, 0.5]])
    loss, metrics = loss_fn("sppo")(
        logprobs=logprobs, old_logprobs=old, advantages=torch.tensor([[2.0, 2.0, 2.0]]),
        response_mask=torch.ones(1, 3), epsilon=0.1,
    )
    # only r = 1.05 is inside [1/1.1, 1.1]: L = -2 * ln(1.05) / 3
    assert loss.item() == pytest.approx(-2 * math.log(1.05) / 3, rel=1e-5)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 3)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2 / 3, 0.0, 0.0]]))


@pytest.mark.parametrize(
    "clip_mode, kept",
    [
        ("none", [1, 1, 1, 1]),
        # ratios [1.5, 0.5, 1.5, 0.5], advantages [+, +, -, -]; band [0.8, 1.2]
        ("two-side", [0, 0, 0, 0]),
        ("one-side", [0, 1, 1, 0]),
        # ring adds far-out tokens the update pulls back: A>0 with r <= 0.4, A<0 with r >= 1.4
        ("ring", [0, 0, 1, 0]),
    ],
)
def test_rec_clip_modes_keep_the_documented_tokens(clip_mode, kept):
    logprobs = leaf([[-1.0, -1.0, -1.0, -1.0]])
    old = with_ratios(logprobs, [[1.5, 0.5, 1.5, 0.5]])
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, metrics = loss_fn("rec")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(1, 4),
        clip_mode=clip_mode, epsilon_low_prime=0.6, epsilon_high_prime=0.4, loss_agg_mode="seq-mean-token-sum",
        follow_loss_agg_mode=True,
    )
    loss.backward()
    # dL/dlog pi = -A on kept tokens
    expected = [-a * k for a, k in zip([1.0, 1.0, -1.0, -1.0], kept)]
    torch.testing.assert_close(logprobs.grad, torch.tensor([expected]))
    assert metrics["pg_clipfrac"] == pytest.approx(1 - sum(kept) / 4)


def test_rec_importance_weight_and_k2_regularizer():
    logprobs = leaf([[-1.0]])
    old = with_ratios(logprobs, [[2.0]])
    loss, _ = loss_fn("rec")(
        logprobs=logprobs, old_logprobs=old, advantages=torch.tensor([[1.0]]), response_mask=torch.ones(1, 1),
        weight="importance_sampling", regularizer="k2", regularizer_coef=0.5,
    )
    # -2 * 1 * (-1) + 0.5 * ln(2)^2
    assert loss.item() == pytest.approx(2.0 + 0.5 * math.log(2.0) ** 2, rel=1e-6)


def test_rec_rejects_an_unknown_clip_mode():
    with pytest.raises(ValueError, match="clip_mode"):
        loss_fn("rec")(
            logprobs=leaf([[-1.0]]), old_logprobs=torch.tensor([[-1.0]]), advantages=torch.ones(1, 1),
            response_mask=torch.ones(1, 1), clip_mode="sideways",
        )


def test_raft_loss_is_the_nll_of_selected_rows_only():
    logprobs = leaf([[-1.0, -3.0], [-2.0, -2.0]])
    loss, metrics = loss_fn("raft")(
        logprobs=logprobs, advantages=torch.tensor([[1.0, 1.0], [0.0, 0.0]]), response_mask=torch.ones(2, 2)
    )
    assert loss.item() == pytest.approx(2.0)
    assert metrics["raft_selected_fraction"] == pytest.approx(0.5)


def test_sft_is_and_sft_phi_weight_the_nll_by_the_token_probability():
    logprobs = leaf([[math.log(0.5), math.log(0.1)]])
    mask = torch.ones(1, 2)
    is_loss, _ = loss_fn("sft_is")(logprobs=logprobs, response_mask=mask)
    # mean of -p * log p
    assert is_loss.item() == pytest.approx(-(0.5 * math.log(0.5) + 0.1 * math.log(0.1)) / 2, rel=1e-6)
    phi_loss, _ = loss_fn("sft_phi")(logprobs=logprobs, response_mask=mask)
    # mean of -p (1 - p) log p
    expected = -(0.25 * math.log(0.5) + 0.09 * math.log(0.1)) / 2
    assert phi_loss.item() == pytest.approx(expected, rel=1e-6)


def test_mu_schedule_warms_up_then_decays_by_cosine():
    args = dict(warmup_steps=10, decay_steps=20, peak=0.5, valley=0.1)
    assert mu_schedule(step=0, **args) == 0.0
    assert mu_schedule(step=5, **args) == pytest.approx(0.25)
    assert mu_schedule(step=10, **args) == pytest.approx(0.5)
    assert mu_schedule(step=20, **args) == pytest.approx(0.3)  # halfway: (0.5 + 0.1) / 2
    assert mu_schedule(step=30, **args) == pytest.approx(0.1)
    assert mu_schedule(step=99, warmup_steps=0, decay_steps=0, peak=0.9, valley=0.2) == pytest.approx(0.2)


def test_mix_chord_blends_ppo_and_phi_sft_with_the_scheduled_weight():
    logprobs = leaf([[-1.0, -1.0], [math.log(0.5), math.log(0.5)]])
    old = logprobs.detach().clone()
    advantages = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    expert = torch.tensor([False, True])
    loss, metrics = loss_fn("mix_chord")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(2, 2),
        expert_mask=expert, global_step=5, mu_warmup_steps=10, mu_peak=0.4, mu_valley=0.1,
    )
    mu = 0.2  # halfway through the warm-up to 0.4
    # ppo at r = 1: -A = -1; sft_phi at p = 0.5: -0.25 * ln 0.5
    expected = (1 - mu) * -1.0 + mu * (-0.25 * math.log(0.5))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["mu"] == pytest.approx(mu)
    assert needs_expert_mask(loss_fn("mix_chord")) and needs_expert_mask(loss_fn("mix"))
    assert not needs_expert_mask(loss_fn("ppo"))


def test_every_policy_loss_name_of_the_reference_system_is_registered():
    names = {
        "ppo", "opmd", "dpo", "sft", "mix", "gspo", "topr", "cispo", "sft_is", "sft_phi", "mix_chord",
        "sppo", "rec", "sapo", "importance_sampling",
    }
    assert names <= set(POLICY_LOSS_FNS.names())
