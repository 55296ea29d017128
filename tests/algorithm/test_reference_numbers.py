"""Trinity-RFT's numbers under its own names, worked out by hand, and trivium's variants as options.

Each test states the reference system's value for a small input (the arithmetic is in the
comments) and, where trivium keeps a variant of its own, the argument that selects it.
"""

import math

import pytest
import torch

from trivium.algorithm import ADVANTAGE_FNS, ENTROPY_LOSS_FNS, KL_FNS, POLICY_LOSS_FNS, PRESETS
from trivium.algorithm.advantages import computed_by_explorer, response_mask_filter, row_selection
from trivium.algorithm.kl import adaptive_kl_coef, apply_kl_penalty, kl_loss
from trivium.algorithm.policy_losses import effective_loss_agg_mode


def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def with_log_ratios(logprobs, log_ratios):
    """old_logprobs such that log pi - log pi_old = log_ratios."""
    return logprobs.detach() - torch.tensor(log_ratios, dtype=torch.float32)


def outcome(scores):
    """One-token rows carrying the scores, and their mask."""
    rewards = torch.tensor(scores, dtype=torch.float32).unsqueeze(-1)
    return rewards, torch.ones_like(rewards)


# ================================================================ advantages


def test_multi_step_grpo_scores_an_episode_by_its_last_step():
    # episode 0 = rows 0, 1 (step rewards 0.2, then 1.0); episodes 1 and 2 one row each (0.0, 0.5).
    # Last-step scores [1.0, 0.0, 0.5]: mean 0.5, sample std sqrt((0.25 + 0.25 + 0) / 2) = 0.5
    # -> a = [1, -1, 0], broadcast to both rows of episode 0.
    rewards, mask = outcome([0.2, 1.0, 0.0, 0.5])
    inputs = {"token_level_rewards": rewards, "response_mask": mask, "group_ids": torch.zeros(4).long(),
                  "episode_ids": torch.tensor([0, 0, 1, 2]), "epsilon": 0.0}
    advantages, _ = ADVANTAGE_FNS.get("multi_step_grpo")(**inputs)
    assert advantages[:, 0].tolist() == pytest.approx([1.0, 1.0, -1.0, 0.0], abs=1e-6)
    # trivium's variant: the mean of the episode's rows, [0.6, 0.0, 0.5]: mean 0.36667,
    # std sqrt((0.23333^2 + 0.36667^2 + 0.13333^2) / 2) = 0.321455
    mean_scored, _ = ADVANTAGE_FNS.get("multi_step_grpo")(**inputs, episode_score="mean")
    std = math.sqrt(((0.6 - 1.1 / 3) ** 2 + (1.1 / 3) ** 2 + (0.5 - 1.1 / 3) ** 2) / 2)
    assert std == pytest.approx(0.321455, abs=1e-6)
    assert mean_scored[:, 0].tolist() == pytest.approx(
        [(0.6 - 1.1 / 3) / std] * 2 + [-(1.1 / 3) / std, (0.5 - 1.1 / 3) / std], abs=1e-5
    )


def test_step_wise_grpo_is_multi_step_grpo_under_the_reference_name():
    assert ADVANTAGE_FNS.get("step_wise_grpo") is ADVANTAGE_FNS.get("multi_step_grpo")


def test_grpo_std_threshold_drops_lone_samples_as_well_as_flat_groups():
    # group 0: [1, 0], std 0.7071 > 0 -> kept; group 1: [1, 1] flat -> dropped; group 2: one sample -> dropped
    # (without a threshold the lone sample would train with 3 / (1 + 1e-6)).
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0, 3.0])
    inputs = {"token_level_rewards": rewards, "response_mask": mask, "group_ids": torch.tensor([0, 0, 1, 1, 2])}
    kept = row_selection(ADVANTAGE_FNS.get("grpo"))(**inputs, std_threshold=0.0)
    assert kept.tolist() == [0, 1]
    advantages, _ = ADVANTAGE_FNS.get("grpo")(**inputs)
    assert advantages[4, 0].item() == pytest.approx(3 / (1 + 1e-6))


def test_grpo_duplicate_experiences_refills_the_batch_with_whole_kept_groups():
    # group 1 is flat and dropped; one kept group (0 or 2) is drawn and appended again
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    torch.manual_seed(0)
    kept = row_selection(ADVANTAGE_FNS.get("grpo"))(
        token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 1, 1, 2, 2]),
        std_threshold=0.0, duplicate_experiences=True,
    ).tolist()
    assert kept[:4] == [0, 1, 4, 5]
    assert kept[4:] in ([0, 1], [4, 5])


def test_grpo_std_cal_level_batch_divides_by_the_spread_of_the_whole_batch():
    # scores [1, 0 | 1, 1 | 4]; batch mean 1.4, sample variance (0.16 + 1.96 + 0.16 + 0.16 + 6.76) / 4 = 2.3,
    # std 1.516575. Group 0: +-0.5 / 1.516575; group 1: 0; the lone sample: (4 - 0) / 1.516575.
    rewards, mask = outcome([1.0, 0.0, 1.0, 1.0, 4.0])
    advantages, _ = ADVANTAGE_FNS.get("grpo")(
        token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 1, 1, 2]),
        std_cal_level="batch", epsilon=0.0,
    )
    std = math.sqrt(2.3)
    assert advantages[:, 0].tolist() == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0, 4 / std], abs=1e-6)


def test_grpo_rank_penalty_scales_scores_by_likelihood_rank():
    # mean logprobs [-0.5, -2.0, -1.0] rank [2, 0, 1] (0 = least likely); rank / n = [2/3, 0, 1/3].
    # Scores [1, 1, 0] * (1 - rank / n * 0.5) = [2/3, 1, 0]: mean 5/9, sample std sqrt(0.259259) = 0.509175.
    rewards, mask = outcome([1.0, 1.0, 0.0])
    advantages, _ = ADVANTAGE_FNS.get("grpo")(
        token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(3).long(),
        sequence_logprobs=torch.tensor([-0.5, -2.0, -1.0]), rank_penalty=0.5, epsilon=0.0,
    )
    std = math.sqrt(((2 / 3 - 5 / 9) ** 2 + (1 - 5 / 9) ** 2 + (5 / 9) ** 2) / 2)
    assert std == pytest.approx(0.509175, abs=1e-6)
    assert advantages[:, 0].tolist() == pytest.approx([(2 / 3 - 5 / 9) / std, (4 / 9) / std, -(5 / 9) / std], abs=1e-5)
    with pytest.raises(ValueError, match="sequence_logprobs"):
        ADVANTAGE_FNS.get("grpo")(token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(3).long(),
                                  rank_penalty=0.5)


def test_rec_normalises_by_the_population_std_and_survives_a_lone_sample():
    # group 0 [1, 0, 0]: mean 1/3, population std sqrt((4/9 + 1/9 + 1/9) / 3) = 0.471405;
    # group 1 (one sample, 2.0): mean 0 and std 1 -> 2 / (1 + 1e-6), where the reference crashes.
    rewards, mask = outcome([1.0, 0.0, 0.0, 2.0])
    advantages, _ = ADVANTAGE_FNS.get("rec")(
        token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 1]), std_normalize=True,
    )
    std = math.sqrt(2 / 9)
    assert std == pytest.approx(0.471405, abs=1e-6)
    assert advantages[:, 0].tolist() == pytest.approx(
        [(2 / 3) / (std + 1e-6), -(1 / 3) / (std + 1e-6), -(1 / 3) / (std + 1e-6), 2 / (1 + 1e-6)], abs=1e-5
    )


def test_opmd_accepts_the_reference_baseline_argument():
    # logavgexp baseline of [1, 0] with tau 1: ln((e + 1) / 2) = 0.620115 -> a = [0.379885, -0.620115]
    rewards, mask = outcome([1.0, 0.0])
    inputs = {"token_level_rewards": rewards, "response_mask": mask, "group_ids": torch.zeros(2).long()}
    advantages, _ = ADVANTAGE_FNS.get("opmd")(**inputs, opmd_baseline="logavgexp")
    assert advantages[:, 0].tolist() == pytest.approx([0.379885, -0.620115], abs=1e-5)
    with pytest.raises(ValueError, match="disagree"):
        ADVANTAGE_FNS.get("opmd")(**inputs, opmd_baseline="logavgexp", baseline="mean")


@pytest.mark.parametrize("name, group_name, args", [
    ("opmd_verl", "opmd", {"opmd_baseline": "logavgexp", "tau": 0.5}),
    ("asymre_verl", "asymre", {"baseline_shift": -0.2}),
])
def test_verl_forms_give_the_same_numbers_in_the_trainer(name, group_name, args):
    # scores [1, 0, 0.5 | 2]: same numbers, computed by the trainer after any KL penalty
    rewards, mask = outcome([1.0, 0.0, 0.5, 2.0])
    inputs = dict(token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 1]), **args)
    trainer_side, _ = ADVANTAGE_FNS.get(name)(**inputs)
    explorer_side, _ = ADVANTAGE_FNS.get(group_name)(**inputs)
    torch.testing.assert_close(trainer_side, explorer_side)
    assert not computed_by_explorer(ADVANTAGE_FNS.get(name))
    assert computed_by_explorer(ADVANTAGE_FNS.get(group_name))


def test_rloo_is_computed_by_the_explorer_and_rloo_verl_by_the_trainer_with_the_same_numbers():
    # rloo: a_i = s_i - mean of the others: [1 - 0.25, 0 - 0.75, 0.5 - 0.5], and 0 baseline alone
    rewards, mask = outcome([1.0, 0.0, 0.5, 2.0])
    inputs = dict(token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 1]))
    explorer_side, _ = ADVANTAGE_FNS.get("rloo")(**inputs)
    trainer_side, _ = ADVANTAGE_FNS.get("rloo_verl")(**inputs)
    torch.testing.assert_close(explorer_side[:, 0], torch.tensor([0.75, -0.75, 0.0, 2.0]))
    torch.testing.assert_close(trainer_side, explorer_side)
    assert computed_by_explorer(ADVANTAGE_FNS.get("rloo"))
    assert not computed_by_explorer(ADVANTAGE_FNS.get("rloo_verl"))


def test_jsd_temperature_divides_both_logprobs_and_chunks_change_nothing():
    # T = 2: s = ln(0.2) / 2 = -0.804719, t = ln(0.6) / 2 = -0.255413;
    # log m = ln(0.5 e^s + 0.5 e^t) = ln(0.5 * (0.447214 + 0.774597)) = -0.492814;
    # JSD = 0.5 (t - log m) + 0.5 (s - log m) = 0.118700 - 0.155953 = -0.037252 -> A = 0.037252
    student = torch.tensor([[math.log(0.2), math.log(0.2)]])
    teacher = torch.tensor([[math.log(0.6), math.log(0.6)]])
    inputs = {"token_level_rewards": torch.zeros(1, 2), "response_mask": torch.tensor([[1.0, 0.0]]),
                  "old_logprobs": student, "teacher_logprobs": teacher, "temperature": 2.0}
    advantages, _ = ADVANTAGE_FNS.get("jsd")(**inputs)
    s, t = math.log(0.2) / 2, math.log(0.6) / 2
    log_m = math.log(0.5 * math.exp(s) + 0.5 * math.exp(t))
    assert log_m == pytest.approx(-0.492814, abs=1e-6)
    assert advantages[0].tolist() == pytest.approx([-(0.5 * (t - log_m) + 0.5 * (s - log_m)), 0.0], abs=1e-6)
    assert advantages[0, 0].item() == pytest.approx(0.037252, abs=1e-6)
    chunked, _ = ADVANTAGE_FNS.get("jsd")(**inputs, chunk_size=1)
    torch.testing.assert_close(chunked, advantages)


@pytest.mark.parametrize("lam, expected", [(0.0, -(math.log(0.2) - math.log(0.6))), (1.0, -(math.log(0.6) - math.log(0.2)))])
def test_jsd_at_the_ends_of_lambda_is_a_one_sample_kl(lam, expected):
    # lambda 0: JSD_t = s - t (KL(student || teacher)); lambda 1: t - s
    advantages, _ = ADVANTAGE_FNS.get("jsd")(
        token_level_rewards=torch.zeros(1, 1), response_mask=torch.ones(1, 1),
        old_logprobs=torch.tensor([[math.log(0.2)]]), teacher_logprobs=torch.tensor([[math.log(0.6)]]),
        lambda_coef=lam,
    )
    assert advantages.item() == pytest.approx(expected, rel=1e-5)


def entropy_filter_inputs():
    """Group [1, 0], four tokens each; S = 0 except one outlier on the negative row (see clipb)."""
    rewards = torch.zeros(2, 4)
    rewards[0, 3] = 1.0
    logprobs = torch.full((2, 4), math.log(0.5))
    entropy = torch.full((2, 4), math.log(2.0))
    logprobs[1, 2], entropy[1, 2] = math.log(0.01), 4.0
    return {"token_level_rewards": rewards, "response_mask": torch.ones(2, 4), "group_ids": torch.zeros(2).long(),
                "logprobs": logprobs, "entropy": entropy, "mu": 2.0}


def test_clipb_removes_dropped_tokens_from_the_response_mask():
    # the outlier (row 1, token 2; negative advantage) leaves the mask; the advantages stay whole
    inputs = entropy_filter_inputs()
    fn = ADVANTAGE_FNS.get("clipb")
    advantages, _ = fn(**inputs)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(advantages, torch.tensor([[a] * 4, [-a] * 4]))
    narrowed = response_mask_filter(fn)(**inputs)
    torch.testing.assert_close(narrowed, torch.tensor([[1.0] * 4, [1.0, 1.0, 0.0, 1.0]]))
    # trivium's variant keeps the token in the mask with advantage 0
    assert torch.equal(response_mask_filter(fn)(**inputs, clip_target="advantage"), inputs["response_mask"])


def test_clipv_removes_dropped_tokens_from_the_mask_and_never_zero_advantage_ones():
    # D = N - S with S = 0: D = N. Row 2 belongs to a flat group (advantage 0) and has the batch's
    # largest D; only the negative-advantage token (row 1, token 1) is dropped, as clipv's docs say.
    rewards = torch.zeros(3, 4)
    rewards[0, 3] = 1.0
    signal = torch.zeros(3, 4)
    signal[1, 1], signal[2, 0] = 5.0, 9.0
    inputs = {
        "token_level_rewards": rewards, "response_mask": torch.ones(3, 4), "group_ids": torch.tensor([0, 0, 1]),
        "logprobs": torch.full((3, 4), math.log(0.5)), "entropy": torch.full((3, 4), math.log(2.0)),
        "expected_entropy_signal": signal, "mu": 1.0, "max_frac": 0.5,
    }
    narrowed = response_mask_filter(ADVANTAGE_FNS.get("clipv"))(**inputs)
    expected = torch.ones(3, 4)
    expected[1, 1] = 0.0
    torch.testing.assert_close(narrowed, expected)


# ================================================================ policy losses


def test_opmd_loss_is_reinforce_over_one_plus_tau():
    # per token -A log pi = [-2 * -1, -1 * -2] = [2, 2]; token mean 2; / (1 + 0.5) = 4/3
    logprobs = leaf([[-1.0, -2.0]])
    loss, _ = POLICY_LOSS_FNS.get("opmd")(
        logprobs=logprobs, old_logprobs=torch.tensor([[-1.5, -2.0]]), advantages=torch.tensor([[2.0, 1.0]]),
        response_mask=torch.ones(1, 2), tau=0.5,
    )
    assert loss.item() == pytest.approx(4 / 3, rel=1e-6)
    loss.backward()
    # dL/dlog pi = -A / (2 * 1.5)
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2 / 3, -1 / 3]]))


def test_sapo_loss_weights_reinforce_by_the_stopped_gate():
    # ratios [1, 3], A = 1, tau 1: f(1) = 4 sigmoid(0) = 2, f(3) = 4 sigmoid(2) = 3.523188;
    # per token -A sg[f] log pi = f (log pi = -1): token mean (2 + 3.523188) / 2 = 2.761594
    logprobs = leaf([[-1.0, -1.0]])
    loss, metrics = POLICY_LOSS_FNS.get("sapo")(
        logprobs=logprobs, old_logprobs=with_log_ratios(logprobs, [[0.0, math.log(3.0)]]),
        advantages=torch.ones(1, 2), response_mask=torch.ones(1, 2),
    )
    gate = 4 / (1 + math.exp(-2.0))
    assert gate == pytest.approx(3.523188, abs=1e-6)
    assert loss.item() == pytest.approx((2 + gate) / 2, rel=1e-6)
    assert metrics["avg_soft_gate"] == pytest.approx((2 + gate) / 2, rel=1e-6)
    loss.backward()
    # dL/dlog pi = -A f / 2
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, -gate / 2]]))


def rec_call(**args):
    logprobs = leaf([[-1.0, -1.0], [-2.0, -5.0]])
    loss, metrics = POLICY_LOSS_FNS.get("rec")(
        logprobs=logprobs, old_logprobs=logprobs.detach(), advantages=torch.tensor([[1.0, 1.0], [-0.5, -0.5]]),
        response_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]), **args,
    )
    return loss, metrics


def test_rec_loss_is_a_token_mean_whatever_loss_agg_mode_says():
    # per token -A log pi: [1, 1 | -1]; token mean 1/3 (seq-mean-token-sum would give (2 - 1) / 2 = 0.5)
    loss, _ = rec_call(loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(1 / 3, rel=1e-6)
    followed, _ = rec_call(loss_agg_mode="seq-mean-token-sum", follow_loss_agg_mode=True)
    assert followed.item() == pytest.approx(0.5, rel=1e-6)
    rec = POLICY_LOSS_FNS.get("rec")
    assert effective_loss_agg_mode(rec, {}, "seq-mean-token-sum") == "token-mean"
    assert effective_loss_agg_mode(rec, {"clip_mode": "gspo-one-side"}, "token-mean") == "seq-mean-token-mean"
    assert effective_loss_agg_mode(rec, {"follow_loss_agg_mode": True}, "seq-mean-token-sum") == "seq-mean-token-sum"


def test_rec_ring_with_only_clip_mode_given_uses_the_constructor_epsilons():
    # ratios [0.5, 1.5], A [+1, -1]; inner band [0.8, 1.2] keeps neither. Outer epsilons 0.4 / 0.4:
    # A > 0 with r <= 0.6 and A < 0 with r >= 1.4 -> both kept (0.6 / 2.0 would keep neither).
    logprobs = leaf([[-1.0, -1.0]])
    loss, metrics = POLICY_LOSS_FNS.get("rec")(
        logprobs=logprobs, old_logprobs=with_log_ratios(logprobs, [[math.log(0.5), math.log(1.5)]]),
        advantages=torch.tensor([[1.0, -1.0]]), response_mask=torch.ones(1, 2), clip_mode="ring",
    )
    loss.backward()
    assert metrics["pg_clipfrac"] == 0.0
    # dL/dlog pi = -A / 2 on both
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.5, 0.5]]))


def test_ppo_sequence_masking_zeroes_negative_tokens_of_far_off_rows():
    # row 0: log r = [-0.3, -0.1], KL_0 = mean(-log r) = 0.2 > 0.1, A = [-1, -1] -> both tokens 0
    # (without masking: clip(0.7408) = 0.8 and 0.9048). Row 1: r = 1, A = [-1, 2] -> [1, -2].
    # token mean over 4 tokens: (0 + 0 + 1 - 2) / 4 = -0.25 (unmasked: (0.8 + 0.904837 - 1) / 4 = 0.176209)
    logprobs = leaf([[-1.0, -1.0], [-1.0, -1.0]])
    inputs = {"logprobs": logprobs, "old_logprobs": with_log_ratios(logprobs, [[-0.3, -0.1], [0.0, 0.0]]),
                  "advantages": torch.tensor([[-1.0, -1.0], [-1.0, 2.0]]), "response_mask": torch.ones(2, 2)}
    loss, metrics = POLICY_LOSS_FNS.get("ppo")(**inputs, enable_sequence_masking=True)
    assert loss.item() == pytest.approx(-0.25, abs=1e-6)
    assert metrics["seq_mask/masked_tokens"] == pytest.approx(0.5)
    assert metrics["seq_mask/mean_sequence_kl"] == pytest.approx(0.1, abs=1e-6)
    plain, _ = POLICY_LOSS_FNS.get("ppo")(**inputs)
    assert plain.item() == pytest.approx((0.8 + math.exp(-0.1) - 1) / 4, abs=1e-6)


def test_ppo_fallback_to_policy_gradient_ignores_the_sampling_logprobs():
    # log r = 5 would be clipped (no gradient); with the fallback r = 1: L = -A = -2, dL/dlog pi = -2
    logprobs = leaf([[-1.0]])
    loss, metrics = POLICY_LOSS_FNS.get("ppo")(
        logprobs=logprobs, old_logprobs=with_log_ratios(logprobs, [[5.0]]), advantages=torch.tensor([[2.0]]),
        response_mask=torch.ones(1, 1), fallback_to_policy_gradient=True,
    )
    loss.backward()
    assert loss.item() == pytest.approx(-2.0)
    assert logprobs.grad.item() == pytest.approx(-2.0)
    assert metrics["ppo_kl"] == 0.0


def test_cispo_mask_clip_drops_tokens_beyond_the_mask_ranges():
    # ratios [1.5, 0.5, 1.5, 0.5], A [+1, +1, -1, -1], log pi = -1; weights clip(r, 0, 1.28) = [1.28, 0.5, 1.28, 0.5].
    # mask clip (1.0, 0.28): A > 0 and r > 1.28 drops token 0. Per token -w M A log pi = [0, 0.5, -1.28, -0.5];
    # token mean -1.28 / 4 = -0.32 (without the mask clip: (1.28 + 0.5 - 1.28 - 0.5) / 4 = 0).
    logprobs = leaf([[-1.0] * 4])
    ratios = [[math.log(1.5), math.log(0.5), math.log(1.5), math.log(0.5)]]
    inputs = {"logprobs": logprobs, "old_logprobs": with_log_ratios(logprobs, ratios),
                  "advantages": torch.tensor([[1.0, 1.0, -1.0, -1.0]]), "response_mask": torch.ones(1, 4)}
    loss, metrics = POLICY_LOSS_FNS.get("cispo")(**inputs, enable_mask_clip=True)
    assert loss.item() == pytest.approx(-0.32, abs=1e-6)
    assert metrics["unmasked_frac"] == pytest.approx(0.75)
    plain, _ = POLICY_LOSS_FNS.get("cispo")(**inputs)
    assert plain.item() == pytest.approx(0.0, abs=1e-6)


def test_losses_the_reference_leaves_unclamped_keep_log_ratios_beyond_twenty():
    # cispo with log r = -25: weight clip(e^-25, 0, 1.28) = e^-25; L = -w A log pi = e^-25 (A = 1, log pi = -1)
    logprobs = leaf([[-1.0]])
    inputs = {"logprobs": logprobs, "old_logprobs": with_log_ratios(logprobs, [[-25.0]]),
                  "advantages": torch.ones(1, 1), "response_mask": torch.ones(1, 1)}
    loss, metrics = POLICY_LOSS_FNS.get("cispo")(**inputs)
    assert loss.item() == pytest.approx(math.exp(-25.0), rel=1e-5)
    assert metrics["ppo_kl"] == pytest.approx(25.0)
    # log_ratio_limit=20 clamps as ppo does: e^-20
    clamped, _ = POLICY_LOSS_FNS.get("cispo")(**inputs, log_ratio_limit=20.0)
    assert clamped.item() == pytest.approx(math.exp(-20.0), rel=1e-5)
    # ppo clamps at 20 in the reference too
    _, ppo_metrics = POLICY_LOSS_FNS.get("ppo")(**inputs)
    assert ppo_metrics["ppo_kl"] == pytest.approx(20.0)


def mix_batch():
    """Two on-policy rows (A = +1, -1) and one expert row; ratio 1 everywhere."""
    logprobs = leaf([[-1.0, -1.0], [-1.0, -1.0], [-2.0, -4.0]])
    return {
        "logprobs": logprobs, "old_logprobs": logprobs.detach(),
        "advantages": torch.tensor([[1.0, 1.0], [-1.0, -1.0], [7.0, 7.0]]),
        "response_mask": torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]]),
        "expert_mask": torch.tensor([False, False, True]), "mu": 0.25,
    }


@pytest.mark.parametrize("batch_args, expected", [
    # default batch-size arguments: every weight 1, so each part is multiplied by its row count:
    # L_rl = (-1 - 1 + 1) / 3 = -1/3 over 2 rows, L_sft = (2 + 4) / 2 = 3 over 1 row:
    # 0.75 * 2 * (-1/3) + 0.25 * 1 * 3 = 0.25
    ({}, 0.25),
    # use_dynamic_bsz: per GPU 320 / 4 = 80 rows, 256 / 4 = 64 usual, 64 / 4 = 16 expert; B = 3:
    # w_u = 80 / (3 * 64), w_e = 80 / (3 * 16): 0.75 * 2 * (-1/3) * 0.416667 + 0.25 * 3 * 1.666667 = 1.041667
    ({"use_dynamic_bsz": True, "ppo_mini_batch_size": 320, "ngpus_trainer": 4, "train_batch_size_usual": 256,
      "train_batch_size_expert": 64}, -0.75 * 2 / 3 * 80 / 192 + 0.75 * 80 / 48),
    # fixed micro-batches of 4: 320 / 4 = 80 per mini-batch; w_u = 80 / 64, w_e = 80 / 16:
    # 0.75 * 2 * (-1/3) * 1.25 + 0.25 * 3 * 5 = 3.125
    ({"ppo_mini_batch_size": 320, "ppo_micro_batch_size_per_gpu": 4, "ngpus_trainer": 4,
      "train_batch_size_usual": 256, "train_batch_size_expert": 64}, 3.125),
])
def test_mix_weights_its_parts_as_the_reference_does(batch_args, expected):
    loss, _ = POLICY_LOSS_FNS.get("mix")(**mix_batch(), **batch_args)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    chord, _ = POLICY_LOSS_FNS.get("mix_chord")(
        **{k: v for k, v in mix_batch().items() if k != "mu"}, mu_peak=0.25, mu_valley=0.25,
        enable_phi_function=False, **batch_args,
    )
    assert chord.item() == pytest.approx(expected, rel=1e-5)


def test_mix_exact_part_means_drops_the_row_count_factors():
    # 0.75 * (-1/3) + 0.25 * 3 = 0.5
    loss, _ = POLICY_LOSS_FNS.get("mix")(**mix_batch(), exact_part_means=True)
    assert loss.item() == pytest.approx(0.5, rel=1e-6)


def test_mix_parts_count_only_their_own_rows_in_sequence_means():
    # seq-mean-token-mean, ratio 1: rl row 0 mean(-1, -1) = -1, row 1 (one token, A = -3) 3 -> (-1 + 3) / 2 = 1;
    # counting the expert row as an empty rl row would give 2 / 3. sft row (2 + 4) / 2 = 3.
    batch = mix_batch()
    batch["advantages"] = torch.tensor([[1.0, 1.0], [-3.0, -3.0], [7.0, 7.0]])
    loss, metrics = POLICY_LOSS_FNS.get("mix")(**batch, loss_agg_mode="seq-mean-token-mean", exact_part_means=True)
    assert metrics["rl/pg_loss"] == pytest.approx(1.0)
    assert loss.item() == pytest.approx(0.75 * 1.0 + 0.25 * 3.0)


def test_dpo_averages_over_every_pair_and_never_sums_pairs():
    # pair 0: chosen sum -2, rejected -4, reference sums -3 and -3: margin 0.1 * ((-2 + 3) - (-4 + 3)) = 0.2,
    # loss ln(1 + e^-0.2) = 0.598139. Pair 1 has empty rows: margin 0, loss ln 2. Mean 0.645643.
    # (The reference sums the log-probabilities of all pairs of a micro-batch into one margin: a bug.)
    logprobs = leaf([[-1.0, -1.0], [-2.0, -2.0], [-1.0, -1.0], [-1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.5], [-1.5, -1.5], [-1.0, -1.0], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    inputs = {"logprobs": logprobs, "old_logprobs": logprobs.detach(), "advantages": torch.zeros(4, 2),
                  "response_mask": mask, "ref_logprobs": ref}
    loss, _ = POLICY_LOSS_FNS.get("dpo")(**inputs)
    pair0 = math.log(1 + math.exp(-0.2))
    assert pair0 == pytest.approx(0.598139, abs=1e-6)
    assert loss.item() == pytest.approx((pair0 + math.log(2)) / 2, rel=1e-6)
    skipped, _ = POLICY_LOSS_FNS.get("dpo")(**inputs, skip_empty_pairs=True)
    assert skipped.item() == pytest.approx(pair0, rel=1e-6)


def test_mix_entropy_aggregates_over_the_policy_rows_only():
    # entropy rows [1, 1], [3, 3], expert [5, 5]; seq-mean-token-mean over rows 0, 1: (1 + 3) / 2 = 2
    # (an expert row counted as an empty row would give 4 / 3); loss -0.1 * 2
    loss, metrics = ENTROPY_LOSS_FNS.get("mix")(
        entropy=torch.tensor([[1.0, 1.0], [3.0, 3.0], [5.0, 5.0]]), response_mask=torch.ones(3, 2),
        expert_mask=torch.tensor([False, False, True]), loss_agg_mode="seq-mean-token-mean", entropy_coef=0.1,
    )
    assert metrics["entropy"] == pytest.approx(2.0)
    assert loss.item() == pytest.approx(-0.2)


# ================================================================ KL


def test_k3_is_unclamped_as_in_the_reference_with_a_guard_at_minus_eighty():
    # d = log pi - log pi_ref = -30: k3 = e^30 - 1 - 30 = 1.0686475e13 (a clamp at 20 would give e^20 - 21)
    logprobs, ref = torch.tensor([[-31.0, -101.0]]), torch.tensor([[-1.0, -1.0]])
    k3 = KL_FNS.get("k3")(logprobs, ref)
    assert k3[0, 0].item() == pytest.approx(math.exp(30) - 31, rel=1e-5)
    # d = -100 would overflow exp in float32 (e^100 > 3.4e38): held at -80, e^80 - 81
    assert k3[0, 1].item() == pytest.approx(math.exp(80) - 81, rel=1e-5)
    clamped = KL_FNS.get("k3_clamped")(logprobs, ref)
    assert clamped[0, 0].item() == pytest.approx(math.exp(20) - 21, rel=1e-5)


def test_corrected_k3_weights_k3_by_the_clamped_importance_ratio():
    # token 0: d = -1 - (-1.5) = 0.5, k3 = e^-0.5 - 1 + 0.5 = 0.106531; ratio e^(-1 - (-1.2)) = e^0.2 = 1.221403
    # -> 0.130117. Token 1: ratio e^(-1 - (-2)) = e = 2.718 clamped to 2 -> 2 * 0.106531.
    logprobs = torch.tensor([[-1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.5]])
    fn = KL_FNS.get("corrected_k3")
    k3 = math.exp(-0.5) - 0.5
    corrected = fn(logprobs, ref, torch.tensor([[-1.2, -2.0]]))
    assert corrected[0].tolist() == pytest.approx([math.exp(0.2) * k3, 2 * k3], rel=1e-5)
    # without old logprobs (the KL penalty) it is plain k3
    assert fn(logprobs, ref)[0].tolist() == pytest.approx([k3, k3], rel=1e-5)
    # kl_loss passes the sampling logprobs on: 0.001 * mean(0.130117, 0.213062)
    loss, _ = kl_loss(logprobs, ref, torch.ones(1, 2), kl_fn="corrected_k3", old_logprobs=torch.tensor([[-1.2, -2.0]]))
    assert loss.item() == pytest.approx(0.001 * (math.exp(0.2) + 2) * k3 / 2, rel=1e-5)


def test_kl_penalty_metric_is_the_mean_of_row_means():
    # rows' mean KL [1, 4] -> 2.5 (a token mean would give (1 + 1 + 4) / 3 = 2)
    _, metrics = apply_kl_penalty(torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [4.0, 9.0]]),
                                  torch.tensor([[1.0, 1.0], [1.0, 0.0]]), kl_coef=0.1)
    assert metrics["kl"] == pytest.approx(2.5)


@pytest.mark.parametrize("current, expected", [
    # KL 0.3 against target 0.1: error clip(3 - 1, -0.2, 0.2) = 0.2; 0.1 * (1 + 0.2 * 4 / 100) = 0.1008
    (0.3, 0.1008),
    # KL 0.09: error -0.1; 0.1 * (1 - 0.1 * 4 / 100) = 0.0996
    (0.09, 0.0996),
])
def test_adaptive_kl_controller_moves_the_coefficient_toward_the_target(current, expected):
    assert adaptive_kl_coef(kl_coef=0.1, current_kl=current, target_kl=0.1, horizon=100, batch_size=4) == (
        pytest.approx(expected)
    )


# ================================================================ presets


def test_presets_carry_the_reference_components():
    assert PRESETS["mix"].entropy_loss_fn == "mix"
    assert (PRESETS["dpo"].kl_loss_fn, PRESETS["dpo"].entropy_loss_fn) == ("k2", "default")
    assert PRESETS["gspo"].loss_agg_mode == "token-mean"
    raft = PRESETS["raft"]
    assert (raft.advantage_fn, raft.policy_loss_fn, raft.group_based) == ("none", "sft", False)
