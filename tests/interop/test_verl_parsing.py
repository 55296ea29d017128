"""Shell-script extraction, override values, batch arithmetic and GPU split of the veRL import."""

from __future__ import annotations

import pytest
import yaml

from trivium.cli.main import main
from trivium.errors import UserError
from trivium.interop.gpu_allocation import split_gpus
from trivium.interop.shell_script import extract_from_arguments, extract_from_script
from trivium.interop.verl_import import IGNORED, convert_arguments
from trivium.interop.verl_values import parse_overrides, parse_value


@pytest.mark.parametrize(
    "text, value",
    [
        ("True", True),
        ("false", False),
        ("null", None),
        ("1024", 1024),
        ("1e-6", 1e-6),
        ("0.6", 0.6),
        ("'error'", "error"),
        ('["console","wandb"]', ["console", "wandb"]),
        ("['a/b.parquet', 'c/d.parquet']", ["a/b.parquet", "c/d.parquet"]),
        ("[]", []),
        ("vllm", "vllm"),
    ],
)
def test_override_values(text, value):
    assert parse_value(text) == value


def test_repeated_key_keeps_the_last_value_and_says_so():
    overrides, notes = parse_overrides(["+trainer.nnodes=1", "trainer.nnodes=2", "~data.tokenizer"])
    assert [(o.key, o.value) for o in overrides] == [("trainer.nnodes", 2)]
    assert len(notes) == 2


def test_malformed_override_names_the_word():
    with pytest.raises(UserError, match="'trainer.nnodes' is not a veRL override"):
        parse_overrides(["trainer.nnodes"])


def test_script_quotes_continuations_and_defaults():
    script = """
export ROOT=/data   # a comment
name="run one"
files="['$ROOT/a/train.parquet', '${ROOT}/b/train.parquet']"
PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo --config-name ppo_megatron_trainer \\
    data.train_files="$files" \\
    trainer.experiment_name="$name" \\
    trainer.default_local_dir=${CKPT:-/tmp/ckpt} \\
    trainer.project_name='$literal' $@
"""
    extracted = extract_from_script(script)
    assert extracted.arguments == [
        "data.train_files=['/data/a/train.parquet', '/data/b/train.parquet']",
        "trainer.experiment_name=run one",
        "trainer.default_local_dir=${oc.env:CKPT,/tmp/ckpt}",
        "trainer.project_name=$literal",
    ]
    assert extracted.ignored_options == ["--config-name ppo_megatron_trainer"]


def test_script_without_the_command_is_an_error():
    with pytest.raises(UserError, match="no 'python3 -m verl.trainer.main_ppo' command"):
        extract_from_script("echo hello\n")


def test_command_line_form_skips_the_entry_point_and_reads_env_references():
    extracted = extract_from_arguments(
        ["python3", "-m", "verl.trainer.main_ppo", "a.b=$HOME/x", "c.d=${USER}"]
    )
    assert extracted.arguments == ["a.b=${oc.env:HOME}/x", "c.d=${oc.env:USER}"]


def test_batch_arithmetic_uses_verl_defaults_when_missing():
    conversion = convert_arguments(["actor_rollout_ref.rollout.n=4", "data.train_batch_size=512"])
    config = conversion.config
    # veRL's default ppo_mini_batch_size is 256.
    assert config["buffer"]["batch_size"] == 256
    assert config["buffer"]["train_batch_size"] == 1024
    assert config["synchronizer"]["sync_interval"] == 2
    assert config["algorithm"]["repeat_times"] == 4
    # veRL's default: no KL anywhere, which trivium must be told explicitly.
    assert config["algorithm"]["kl_loss_fn"] == "none"
    assert config["algorithm"]["kl_penalty_fn"] == "none"


def test_batch_size_that_does_not_divide_is_rejected():
    with pytest.raises(UserError, match="not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=300"):
        convert_arguments(["data.train_batch_size=1024", "actor_rollout_ref.actor.ppo_mini_batch_size=300"])


def test_non_numeric_gpu_count_is_rejected():
    with pytest.raises(UserError, match="trainer.n_gpus_per_node must be a positive integer, got 'eight'"):
        convert_arguments(["trainer.n_gpus_per_node=eight"])


def test_kl_in_reward_and_unknown_sections():
    conversion = convert_arguments(
        [
            "algorithm.use_kl_in_reward=True",
            "algorithm.kl_penalty=mse",
            "algorithm.kl_ctrl.kl_coef=0.01",
            "ray_init.num_cpus=4",
            "custom_reward_function.path=my.py",
        ]
    )
    algorithm = conversion.config["algorithm"]
    assert algorithm["kl_penalty_fn"] == "k2"
    assert algorithm["kl_penalty_fn_args"] == {"kl_coef": 0.01, "adaptive": False}
    by_key = {line.source: line for line in conversion.report}
    assert by_key["ray_init.num_cpus"].action == IGNORED
    assert "default_reward_fn_type" in by_key["custom_reward_function.path"].detail


def test_adaptive_kl_controller_maps_to_the_penalty_arguments():
    conversion = convert_arguments(
        ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0.05"]
    )
    # horizon is veRL's default, 10000
    assert conversion.config["algorithm"]["kl_penalty_fn_args"] == {"adaptive": True, "target_kl": 0.05, "horizon": 10000}


def test_kl_controller_without_kl_in_reward_is_reported_ignored():
    conversion = convert_arguments(["algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.horizon=500"])
    by_key = {line.source: line for line in conversion.report}
    assert by_key["algorithm.kl_ctrl.type"].action == IGNORED
    assert by_key["algorithm.kl_ctrl.horizon"].action == IGNORED
    assert "kl_penalty_fn_args" not in conversion.config["algorithm"]


def test_unknown_kl_controller_is_a_clear_error():
    with pytest.raises(UserError, match="algorithm.kl_ctrl.type=pid has no trivium equivalent"):
        convert_arguments(["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=pid"])


def test_val_kwargs_reach_every_eval_taskset():
    conversion = convert_arguments(
        [
            "data.val_files=[/d/aime/test.parquet,/d/math/test.parquet]",
            "actor_rollout_ref.rollout.val_kwargs.n=4",
            "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
        ]
    )
    evals = conversion.config["buffer"]["explorer_input"]["eval_tasksets"]
    assert [(t["name"], t["path"], t["split"]) for t in evals] == [
        ("aime_eval", "/d/aime", "test"),
        ("math_eval", "/d/math", "test"),
    ]
    assert all(t["repeat_times"] == 4 and t["rollout_args"] == {"temperature": 0.6} for t in evals)


def test_logger_without_a_supported_monitor_gives_none():
    conversion = convert_arguments(["trainer.logger=[console,swanlab]"])
    assert conversion.config["monitor"]["monitor_type"] == "none"
    assert "swanlab" in {line.source: line for line in conversion.report}["trainer.logger"].detail


@pytest.mark.parametrize(
    "total, rollout_tp, auxiliary, rollout_engines, auxiliary_engines, trainer",
    [(8, 1, (1,), 2, (2,), 4), (8, 2, (), 1, (), 6), (16, 2, (), 2, (), 12), (2, 1, (), 1, (), 1)],
)
def test_gpu_split(total, rollout_tp, auxiliary, rollout_engines, auxiliary_engines, trainer):
    split = split_gpus(total, rollout_tp, auxiliary)
    assert (split.rollout_engines, split.auxiliary_engines, split.trainer_gpus) == (
        rollout_engines,
        auxiliary_engines,
        trainer,
    )


def test_gpu_split_that_leaves_no_trainer_is_an_error():
    with pytest.raises(UserError, match="inference engines alone need 4"):
        split_gpus(4, 4)


def test_single_gpu_runs_colocated():
    conversion = convert_arguments(
        ["trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    )
    assert conversion.config["mode"] == "colocate"
    assert conversion.config["explorer"]["rollout_model"]["engine_num"] == 1


def test_cli_arguments_after_double_dash(capsys):
    code = main(["convert", "verl", "--", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8"])
    assert code == 0
    captured = capsys.readouterr()
    config = yaml.safe_load(captured.out)
    assert config["algorithm"]["algorithm_type"] == "grpo"
    assert config["buffer"]["train_batch_size"] == 2048
    assert "mapped (" in captured.err


def test_cli_unknown_estimator_is_a_clear_error(capsys):
    assert main(["convert", "verl", "--", "algorithm.adv_estimator=magic"]) == 2
    assert "supported: gae, grpo" in capsys.readouterr().err
