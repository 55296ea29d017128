"""The algorithm section is checked against the registered functions and strategies; bench ignores it."""

from __future__ import annotations

import sys
import textwrap

import pytest

from trivium.algorithm import ADVANTAGE_FNS
from trivium.config.errors import ConfigError
from trivium.config.prepare import prepare
from trivium.errors import UserError

EVAL = {"buffer": {"explorer_input": {"eval_tasksets": [{"name": "eval", "path": "/data/eval"}]}}}
SFT_DATA = {"sft_dataset": {"storage_type": "file", "path": "/data/sft"}}


def bench(algorithm: dict) -> dict:
    return {"mode": "bench", "algorithm": algorithm, **EVAL}


def error_of(write_config, patch: dict, overrides: list[str] = ()) -> str:
    with pytest.raises(ConfigError) as error:
        prepare(write_config(patch), overrides)
    return str(error.value)


def algorithm_keys(message: str) -> list[str]:
    """The keys of the problems listed in a ConfigError message."""
    lines = message.splitlines()[1:] if len(message.splitlines()) > 1 else [message.split(": ", 1)[1]]
    return [line.strip().removeprefix("- ").split(":")[0] for line in lines]


# ---------------------------------------------------------------- bench mode


@pytest.mark.parametrize("algorithm", [
    {"algorithm_type": "grpo", "repeat_times": 1},
    {"algorithm_type": "sft"},
    {"algorithm_type": "dpo"},
    {"algorithm_type": "mix", "repeat_times": 1},  # mix would also need auxiliary buffers
    {"algorithm_type": "grpo", "advantage_fn": "grpoo", "kl_loss_fn_args": {"kl_coeff": 1}},
], ids=["grpo-one-repeat", "sft", "dpo", "mix", "bad-functions"])
def test_bench_mode_ignores_the_training_algorithm(write_config, algorithm):
    (stage,) = prepare(write_config(bench(algorithm)))
    assert stage.config.mode == "bench"


def test_bench_mode_still_checks_its_own_keys(write_config):
    message = error_of(write_config, {"mode": "bench", "algorithm": {"algorithm_type": "sft"}})
    assert "buffer.explorer_input.eval_tasksets" in message
    assert "sft" not in message


def test_the_same_algorithm_outside_bench_is_still_an_error(write_config):
    message = error_of(write_config, {"algorithm": {"algorithm_type": "grpo", "repeat_times": 1}})
    assert "repeat_times >= 2" in message


# ---------------------------------------------------------------- function names and arguments


@pytest.mark.parametrize("algorithm, expected", [
    ({"advantage_fn": "grpoo"}, ["algorithm.advantage_fn", "Unknown advantage_fn 'grpoo'", "Did you mean 'grpo'"]),
    ({"policy_loss_fn": "ppoo"}, ["algorithm.policy_loss_fn", "Did you mean 'ppo'"]),
    ({"kl_loss_fn": "low_var"}, ["algorithm.kl_loss_fn", "Did you mean 'low_var_kl'"]),
    ({"kl_penalty_fn": "k9"}, ["algorithm.kl_penalty_fn", "Unknown kl_fn 'k9'"]),
    ({"entropy_loss_fn": "defualt"}, ["algorithm.entropy_loss_fn", "Did you mean 'default'"]),
    ({"advantage_fn_args": {"epsilonn": 1e-5}}, ["algorithm.advantage_fn_args", "'epsilonn'", "Did you mean 'epsilon'"]),
    ({"policy_loss_fn_args": {"clip_range_lo": 0.1}},
     ["algorithm.policy_loss_fn_args", "Did you mean 'clip_range_low'", "clip_ratio_c"]),
    ({"advantage_fn": "ppo", "advantage_fn_args": {"epsilon": 1e-5}},  # ppo's estimator takes gamma/lam, not epsilon
     ["algorithm.advantage_fn_args", "unknown argument 'epsilon'", "gamma, lam, skip_masked_tokens, whiten"]),
    ({"kl_loss_fn_args": {"kl_coeff": 0.1}}, ["algorithm.kl_loss_fn_args", "Did you mean 'kl_coef'"]),
    ({"kl_penalty_fn_args": {"kl_coef": 0.1, "adaptive": True, "target_kl": 0.2}},
     ["algorithm.kl_penalty_fn_args.horizon", "adaptive KL needs target_kl and horizon"]),
    ({"kl_loss_fn_args": {"kl_coef": -0.1}}, ["algorithm.kl_loss_fn_args.kl_coef: must be at least 0, got -0.1"]),
    ({"entropy_loss_fn_args": {"entropy_coeff": 0.01}}, ["algorithm.entropy_loss_fn_args", "Did you mean 'entropy_coef'"]),
    ({"entropy_loss_fn_args": {"entropy_coef": "high"}}, ["algorithm.entropy_loss_fn_args.entropy_coef", "expected a number"]),
    ({"policy_loss_fn": "mix", "policy_loss_fn_args": {"rl_loss_fn": "gspoo"}},
     ["algorithm.policy_loss_fn_args.rl_loss_fn", "Did you mean 'gspo'"]),
    ({"policy_loss_fn": "mix", "policy_loss_fn_args": {"rl_loss_fn_args": {"clip_rnage": 0.2}}},
     ["algorithm.policy_loss_fn_args.rl_loss_fn_args", "Did you mean 'clip_range'"]),
], ids=["advantage-name", "policy-name", "kl-loss-name", "kl-penalty-name", "entropy-name", "advantage-arg",
        "policy-arg", "arg-of-the-chosen-fn", "kl-loss-arg", "kl-penalty-extra", "kl-coef-negative",
        "entropy-arg", "entropy-coef-type", "mix-inner-name", "mix-inner-arg"])
def test_algorithm_function_mistakes_are_config_errors(write_config, algorithm, expected):
    message = error_of(write_config, {"algorithm": algorithm})
    for text in expected:
        assert text in message, f"{text!r} missing from:\n{message}"


def test_every_function_problem_is_reported_at_once(write_config):
    message = error_of(write_config, {"algorithm": {
        "advantage_fn_args": {"epsilonn": 1}, "kl_loss_fn_args": {"coef": 1}, "entropy_loss_fn_args": {"coef": 1},
    }})
    assert algorithm_keys(message) == [
        "algorithm.advantage_fn_args", "algorithm.kl_loss_fn_args", "algorithm.entropy_loss_fn_args",
    ]


def test_valid_function_arguments_pass(write_config):
    (stage,) = prepare(write_config({"algorithm": {
        "advantage_fn_args": {"epsilon": 1e-5, "std_normalize": False},
        "policy_loss_fn_args": {"clip_range_low": 0.2, "clip_range_high": 0.28},
        "kl_loss_fn": "low_var_kl", "kl_loss_fn_args": {"kl_coef": 0.001},
        "kl_penalty_fn": "k1", "kl_penalty_fn_args": {"kl_coef": 0},
        "entropy_loss_fn_args": {"entropy_coef": 0.01},
    }}))
    assert stage.config.algorithm.policy_loss_fn_args == {"clip_range_low": 0.2, "clip_range_high": 0.28}


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """An importable module ``trivium_test_advantages`` with one advantage function taking ``scale``."""
    (tmp_path / "trivium_test_advantages.py").write_text(textwrap.dedent("""
        def scaled(*, token_level_rewards, response_mask, scale=1.0, **_ignored):
            return token_level_rewards * scale * response_mask, token_level_rewards, {}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "trivium_test_advantages:scaled"
    sys.modules.pop("trivium_test_advantages", None)


def test_dotted_path_function_is_imported_and_its_arguments_checked(write_config, plugin_module):
    algorithm = {"advantage_fn": plugin_module, "advantage_fn_args": {"scale": 2.0}}
    (stage,) = prepare(write_config({"algorithm": algorithm}))
    assert stage.config.algorithm.advantage_fn == plugin_module
    message = error_of(write_config, {"algorithm": {**algorithm, "advantage_fn_args": {"scael": 2.0}}})
    assert "algorithm.advantage_fn_args" in message and "Did you mean 'scale'" in message


def test_dotted_path_that_does_not_import_here_is_a_note_not_an_error(write_config):
    (stage,) = prepare(write_config({"algorithm": {"policy_loss_fn": "cluster_only.losses:my_loss",
                                                   "policy_loss_fn_args": {"anything": 1}}}))
    notes = [note for note in stage.notes if note.key == "algorithm.policy_loss_fn"]
    assert len(notes) == 1 and "cannot be imported here" in notes[0].message


PLUGIN_SOURCE = """
from trivium.algorithm import register_advantage_fn

@register_advantage_fn("{name}")
def plugin_advantages(*, token_level_rewards, response_mask, shift=0.0, **_ignored):
    return token_level_rewards + shift, token_level_rewards, {{}}
"""


def test_plugin_dir_is_loaded_before_validation(write_config, tmp_path, monkeypatch):
    ADVANTAGE_FNS.names()  # load the built-ins, then give this test its own copy of the table
    monkeypatch.setattr(ADVANTAGE_FNS, "_items", dict(ADVANTAGE_FNS._items))
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "config_rules_plugin.py").write_text(PLUGIN_SOURCE.format(name="shifted_from_plugin"))
    monkeypatch.delitem(sys.modules, "trivium_plugin_config_rules_plugin", raising=False)
    path = write_config({"algorithm": {"advantage_fn": "shifted_from_plugin", "advantage_fn_args": {"shift": 1}}})

    with pytest.raises(ConfigError, match="Unknown advantage_fn 'shifted_from_plugin'"):
        prepare(path)
    (stage,) = prepare(path, plugin_dirs=[plugins])
    assert stage.config.algorithm.advantage_fn == "shifted_from_plugin"
    sys.modules.pop("trivium_plugin_config_rules_plugin", None)


def test_missing_plugin_dir_is_a_user_error(write_config, tmp_path):
    with pytest.raises(UserError, match="--plugin-dir: plugin directory not found"):
        prepare(write_config(), plugin_dirs=[tmp_path / "nope"])


# ---------------------------------------------------------------- sample strategies


@pytest.mark.parametrize("patch, expected", [
    ({"algorithm": {"sample_strategy": "staleness_control", "sample_strategy_args": {"max_stalenes": 2}}},
     ["algorithm.sample_strategy_args", "unknown argument 'max_stalenes'", "Did you mean 'max_staleness'"]),
    ({"algorithm": {"sample_strategy": "staleness_control", "sample_strategy_args": {"max_staleness": -1}}},
     ["algorithm.sample_strategy_args.max_staleness: must be at least 0, got -1"]),
    ({"algorithm": {"sample_strategy": "staleness_control", "sample_strategy_args": {"max_staleness": 1.5}}},
     ["algorithm.sample_strategy_args.max_staleness", "expected an integer"]),
    ({"algorithm": {"sample_strategy": "staleness_control", "sample_strategy_args": {"mode": "downweigh"}}},
     ["algorithm.sample_strategy_args.mode", "drop, downweight", "Did you mean 'downweight'"]),
    ({"algorithm": {"sample_strategy": "mix"}},
     ["buffer.trainer_input.auxiliary_buffers", "sample_strategy 'mix'", "auxiliary_buffers.sft_dataset"]),
    ({"algorithm": {"algorithm_type": "mix"}}, ["buffer.trainer_input.auxiliary_buffers"]),
    ({"algorithm": {"sample_strategy": "mix", "sample_strategy_args": {"expert_data_ratio": 1.0}},
      "buffer": {"trainer_input": {"auxiliary_buffers": SFT_DATA}}},
     ["algorithm.sample_strategy_args.expert_data_ratio: must be in [0, 1), got 1.0"]),
    ({"algorithm": {"sample_strategy": "mix", "sample_strategy_args": {"expert_ratio": 0.5}},
      "buffer": {"trainer_input": {"auxiliary_buffers": SFT_DATA}}},
     ["unknown argument 'expert_ratio'", "Did you mean 'expert_data_ratio'"]),
    ({"algorithm": {"sample_strategy_args": {"max_staleness": 2}}},
     ["algorithm.sample_strategy_args", "sample_strategy 'default' takes no arguments", "max_staleness"]),
], ids=["staleness-typo", "staleness-negative", "staleness-float", "staleness-mode", "mix-without-expert-data",
        "mix-preset-without-expert-data", "mix-ratio-one", "mix-typo", "default-with-args"])
def test_sample_strategy_mistakes_are_config_errors(write_config, patch, expected):
    message = error_of(write_config, patch)
    for text in expected:
        assert text in message, f"{text!r} missing from:\n{message}"


@pytest.mark.parametrize("algorithm, buffer", [
    ({"sample_strategy": "staleness_control", "sample_strategy_args": {"max_staleness": 0, "mode": "downweight"}}, {}),
    ({"sample_strategy": "mix", "sample_strategy_args": {"expert_data_ratio": 0.0}},
     {"trainer_input": {"auxiliary_buffers": SFT_DATA}}),
], ids=["staleness", "mix"])
def test_valid_sample_strategy_args_pass(write_config, algorithm, buffer):
    (stage,) = prepare(write_config({"algorithm": algorithm, "buffer": buffer}))
    assert stage.config.algorithm.sample_strategy_args == algorithm["sample_strategy_args"]


def test_mix_in_explore_mode_needs_no_expert_data(write_config):
    # The explorer only produces experiences; the expert rows are mixed in by a later trainer.
    (stage,) = prepare(write_config({"mode": "explore", "algorithm": {"algorithm_type": "mix"}}))
    assert stage.config.algorithm.sample_strategy == "mix"


# ---------------------------------------------------------------- monitor and trainer pass-through


def test_monitor_type_accepts_a_dotted_path(write_config):
    (stage,) = prepare(write_config({"monitor": {"monitor_type": "my_package.monitors:JsonMonitor"}}))
    assert stage.config.monitor.monitor_type == "my_package.monitors:JsonMonitor"


def test_unknown_monitor_name_mentions_the_dotted_path_form(write_config):
    message = error_of(write_config, {"monitor": {"monitor_type": "tensorbord"}})
    assert "monitor.monitor_type" in message and "Did you mean 'tensorboard'" in message
    assert ", or a dotted path like 'my_package.module:Name'" in message


@pytest.mark.parametrize("source", ["auto", "recompute", "engine"])
def test_old_logprobs_source_accepts_its_three_values(write_config, source):
    (stage,) = prepare(write_config({"trainer": {"trainer_config": {"old_logprobs_source": source}}}))
    assert stage.config.trainer.trainer_config["old_logprobs_source"] == source


def test_old_logprobs_source_rejects_other_values(write_config):
    message = error_of(write_config, {"trainer": {"trainer_config": {"old_logprobs_source": "rollout"}}})
    assert "trainer.trainer_config.old_logprobs_source" in message
    assert "'rollout'" in message and "auto, recompute, engine" in message


def test_plugin_dir_argument_feeds_prepare(write_config, tmp_path):
    import argparse

    from trivium.config.cli_args import add_config_arguments, add_plugin_dir_argument

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    add_plugin_dir_argument(parser)
    (tmp_path / "empty_plugins").mkdir()
    args = parser.parse_args(["--config", str(write_config()), "--plugin-dir", str(tmp_path / "empty_plugins"),
                              "--plugin-dir", str(tmp_path / "empty_plugins"), "algorithm.repeat_times=2"])
    assert args.plugin_dir == [str(tmp_path / "empty_plugins")] * 2
    (stage,) = prepare(args.config, args.overrides, plugin_dirs=args.plugin_dir)
    assert stage.config.algorithm.repeat_times == 2


# ---------------------------------------------------------------- names and arguments of the reference system


def test_reference_kl_arguments_and_names_pass(write_config):
    (stage,) = prepare(write_config({"algorithm": {
        "algorithm_type": "grpo_verl", "repeat_times": 4,
        "kl_penalty_fn": "k3", "kl_penalty_fn_args": {"kl_coef": 0.01, "adaptive": True, "target_kl": 0.1,
                                                      "horizon": 10000},
        "kl_loss_fn": "corrected_k3", "kl_loss_fn_args": {"kl_coef": 0.001, "adaptive": False},
        "loss_agg_mode": "seq-mean-token-sum-norm",
    }}))
    assert stage.config.algorithm.kl_penalty_fn_args["adaptive"] is True
    notes = [note.key for note in stage.notes if note.kind == "unused"]
    assert "algorithm.kl_loss_fn_args.adaptive" in notes


def test_warmup_sample_strategy_is_the_default_one(write_config):
    (stage,) = prepare(write_config({"algorithm": {"sample_strategy": "warmup"}}))
    assert stage.config.algorithm.sample_strategy == "default"
    assert any(note.key == "algorithm.sample_strategy" and note.kind == "deprecated" for note in stage.notes)


@pytest.mark.parametrize("algorithm", [
    {"algorithm_type": "multi_step_grpo", "advantage_fn": "step_wise_grpo",
     "advantage_fn_args": {"std_cal_level": "batch", "std_threshold": 0.0001, "enable_step_norm": True}},
    {"advantage_fn_args": {"std_cal_level": "batch", "rank_penalty": 0.1, "std_threshold": 0.0,
                           "duplicate_experiences": True}},
    {"algorithm_type": "opmd", "advantage_fn": "opmd_verl", "advantage_fn_args": {"opmd_baseline": "logavgexp"}},
    {"algorithm_type": "asymre", "advantage_fn": "asymre_verl"},
    {"algorithm_type": "jsd", "advantage_fn_args": {"temperature": 2.0, "chunk_size": 128}},
    {"policy_loss_fn_args": {"enable_sequence_masking": True, "delta_sequence_masking": 0.1,
                             "fallback_to_policy_gradient": True}},
    {"algorithm_type": "cispo", "policy_loss_fn_args": {"enable_mask_clip": True, "mask_clip_range_low": 1.0,
                                                        "mask_clip_range_high": 0.28}},
    {"algorithm_type": "mix", "policy_loss_fn_args": {"grpo_loss_agg_mode": "token-mean"}},
], ids=["step-wise-grpo", "grpo-args", "opmd-verl", "asymre-verl", "jsd-args", "ppo-args", "cispo-args", "mix-args"])
def test_reference_names_and_arguments_are_accepted(write_config, algorithm):
    patch = {"algorithm": {"repeat_times": 4, **algorithm}}
    if algorithm.get("algorithm_type") == "mix":
        patch["buffer"] = {"trainer_input": {"auxiliary_buffers": SFT_DATA}}
    if algorithm.get("algorithm_type") == "jsd":
        patch["explorer"] = {"auxiliary_models": [{"model_path": "/models/teacher"}]}
    prepare(write_config(patch))


def test_a_kept_weight_range_needs_the_decoupled_objective(write_config):
    message = error_of(write_config, {"trainer": {"behaviour_weight_range": [0.5, 2.0]}})
    assert "trainer.behaviour_weight_range" in message and "set old_logprobs_source: decoupled" in message


def test_a_kept_weight_range_must_be_low_below_high(write_config):
    patch = {"trainer": {"old_logprobs_source": "decoupled", "behaviour_weight_range": [2.0, 0.5]}}
    assert "must be [low, high] with 0 <= low < high" in error_of(write_config, patch)
