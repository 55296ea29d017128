"""Key-mapping files for upper-level tool configs, and their safe expressions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trivium.config.key_mapping import apply_mapping, load_mapping
from trivium.config.mapping_expressions import ExpressionError, evaluate
from trivium.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "interop"
UPPER = {
    "a": {"train_batch_size": 8, "num_repeat": 4, "gpus": 6, "tp": 4, "name": "x", "flag": True},
    "items": [{"size": 3}, {"size": 5}],
}


def lookup(path: str):
    from trivium.config.dotted_paths import get_path

    return get_path(UPPER, path)


def test_golden_upper_config_and_mapping_give_the_expected_trivium_dict():
    upper = yaml.safe_load((EXAMPLES / "upper_config.yaml").read_text())
    mapped = apply_mapping(upper, load_mapping(EXAMPLES / "upper_mapping.json"))
    assert mapped == {
        "project": "agent_math",
        "name": "tiny_grpo",
        "model": {
            "model_path": "${oc.env:MODEL_PATH,./models/tiny}",
            "max_prompt_tokens": 256,
            "max_response_tokens": 512,
            "max_model_len": 768,  # 256 + 512
            "temperature": 0.9,
        },
        "buffer": {
            "batch_size": 8,
            "train_batch_size": 32,  # 8 * 4
            "total_steps": 10,
            "explorer_input": {"tasksets": [{"name": "gsm8k", "path": "./data/gsm8k"}]},
        },
        "algorithm": {"repeat_times": 4, "optimizer": {"lr": 1e-6}},
        "explorer": {"rollout_model": {"tensor_parallel_size": 1, "engine_num": 2}, "eval_interval": 5},
        "trainer": {"total_steps": 10, "save_interval": 5},
        "cluster": {"gpu_per_node": 8},
    }


def test_precedence_through_the_loader(monkeypatch):
    from trivium.config.load import load_config

    monkeypatch.delenv("MODEL_PATH", raising=False)
    config = load_config(
        EXAMPLES / "upper_config.yaml",
        overrides=["explorer.eval_interval=10"],
        mapping=EXAMPLES / "upper_mapping.json",
    )
    assert config.buffer.train_batch_size == 32  # mapped from the tool's keys
    assert config.model.temperature == 1.0  # the trivium: section wins over the mapped 0.9
    assert config.explorer.eval_interval == 10  # the command line wins over everything
    assert config.model.model_path == "./models/tiny"  # interpolation resolved before mapping
    assert config.algorithm.algorithm_type == "grpo"


@pytest.mark.parametrize(
    "expression, value",
    [
        ("(a.train_batch_size * a.num_repeat)", 32),
        ("(a.gpus / a.tp)", 1.5),
        ("(a.gpus // a.tp)", 1),
        ("(a.gpus % a.tp + -a.num_repeat)", -2),
        ("(max(1, a.gpus // a.tp, 2) * 3)", 6),
        ("(min(a.gpus, 4) - abs(-1))", 3),
        ("(round(a.gpus / a.tp) + int(2.7) + float(1))", 5.0),
        ("(items[1].size * 2)", 10),
    ],
)
def test_expression_values(expression, value):
    result = evaluate(expression, lookup)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    "expression, message",
    [
        ("(a.gpus * )", "cannot parse the mapping expression (a.gpus * )"),
        ("(a.gpus ** 2)", "operator ** is not allowed"),
        ("(__import__('os').system('true'))", "unknown function"),
        ("(open(1))", "unknown function 'open'"),
        ("(a.__class__)", "names starting with '_' are not allowed"),
        ("(max(1, 2).real)", "is not a config path"),
        ("(a.gpus if a.tp else 1)", "IfExp"),
        ("(a.gpus // (a.tp - 4))", "division by zero"),
        ("(a.name * 2)", "'a.name' is 'x', not a number"),
        ("(a.flag + 1)", "not a number"),
        ("('a' + 'b')", "only numbers are allowed"),
        ("(lambda: 1)()", "unknown function"),
        ("(max(*[1, 2]))", "positional arguments only"),
    ],
)
def test_bad_expressions_are_clear_errors(expression, message):
    with pytest.raises(ExpressionError) as error:
        evaluate(expression, lookup)
    assert message in str(error.value)
    assert isinstance(error.value, UserError)


def test_missing_source_key_names_the_closest_key():
    with pytest.raises(UserError, match="reads 'a.num_repeats'.*closest key there is 'a.num_repeat'"):
        apply_mapping(UPPER, {"(a.num_repeats * 2)": "algorithm.repeat_times"})


def test_unknown_target_key_names_the_closest_valid_key():
    with pytest.raises(UserError, match="targets 'buffer.train_batchsize'.*train_batch_size"):
        apply_mapping(UPPER, {"a.train_batch_size": "buffer.train_batchsize"})


def test_one_source_to_several_targets_and_open_sections():
    mapped = apply_mapping(UPPER, {"a.gpus": ["cluster.gpu_per_node", "trainer.trainer_config.custom.x"]})
    assert mapped == {"cluster": {"gpu_per_node": 6}, "trainer": {"trainer_config": {"custom": {"x": 6}}}}


def test_mapping_file_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_mapping(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"a.b": "c",}')
    with pytest.raises(UserError, match=r"not valid JSON \(line 1"):
        load_mapping(broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"a.b": 3}))
    with pytest.raises(UserError, match="value of 'a.b' must be a trivium key"):
        load_mapping(wrong)
