"""Every preset names functions that exist, with flags that agree with them."""

import pytest

from trivium.algorithm import (
    ADVANTAGE_FNS,
    ENTROPY_LOSS_FNS,
    KL_FNS,
    LOSS_AGG_MODES,
    POLICY_LOSS_FNS,
    PRESETS,
    check_fn_args,
    requires_critic,
    requires_groups,
)
from trivium.algorithm.advantages import requires_teacher
from trivium.errors import UserError

EXPECTED = {
    "ppo", "grpo", "opmd", "dpo", "sft", "mix", "rloo", "reinforceplusplus", "remax", "gspo", "cispo",
    "asymre", "topr", "sapo", "rec", "sppo", "raft", "mix_chord", "on_policy_distill", "jsd", "grpo_verl",
}


def test_all_documented_algorithms_have_a_preset():
    assert EXPECTED <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_functions_are_registered(name):
    preset = PRESETS[name]
    assert preset.advantage_fn in ADVANTAGE_FNS
    assert preset.policy_loss_fn in POLICY_LOSS_FNS
    assert preset.kl_penalty_fn in KL_FNS
    assert preset.kl_loss_fn in KL_FNS
    assert preset.entropy_loss_fn in ENTROPY_LOSS_FNS
    assert preset.loss_agg_mode in LOSS_AGG_MODES


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_flags_agree_with_the_advantage_function(name):
    preset = PRESETS[name]
    advantage_fn = ADVANTAGE_FNS.get(preset.advantage_fn)
    assert preset.group_based == requires_groups(advantage_fn)
    assert preset.use_critic == requires_critic(advantage_fn)
    assert preset.needs_teacher_logprobs == requires_teacher(advantage_fn)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_summary_for_the_listing(name):
    assert PRESETS[name].summary


def test_presets_declare_what_the_explorer_must_add():
    assert PRESETS["remax"].needs_greedy_baseline
    assert {n for n, p in PRESETS.items() if p.needs_teacher_logprobs} == {"on_policy_distill", "jsd"}
    assert {n for n, p in PRESETS.items() if p.needs_expert_data} == {"mix", "mix_chord"}
    assert {n for n, p in PRESETS.items() if not p.learns_from_rollouts} == {"sft", "dpo", "cpt"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_arguments_are_accepted_by_their_functions(name):
    preset = PRESETS[name]
    check_fn_args(ADVANTAGE_FNS.get(preset.advantage_fn), preset.advantage_fn_args, key="advantage_fn_args")
    check_fn_args(
        POLICY_LOSS_FNS.get(preset.policy_loss_fn), preset.policy_loss_fn_args, key="policy_loss_fn_args"
    )


def test_misspelt_argument_is_a_user_error_with_a_suggestion():
    with pytest.raises(UserError, match="Did you mean 'clip_range'"):
        check_fn_args(POLICY_LOSS_FNS.get("ppo"), {"clip_rnage": 0.1}, key="algorithm.policy_loss_fn_args")


def test_batch_inputs_are_not_user_arguments():
    with pytest.raises(UserError, match="loss_agg_mode"):
        check_fn_args(
            POLICY_LOSS_FNS.get("ppo"), {"loss_agg_mode": "token-mean"}, key="algorithm.policy_loss_fn_args"
        )


def test_package_exports_resolve_and_match_all():
    from trivium import algorithm

    for name in algorithm.__all__:
        assert getattr(algorithm, name) is not None
    assert set(algorithm.__all__) == set(algorithm._EXPORTS)
