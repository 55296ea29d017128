"""reasoning-gym tasksets: rows carry what score_answer needs, are the same per seed, never
share a question between splits; bad names and options are refused."""

import json

import datasets
import pytest
import reasoning_gym

from trivium.cli.main import main
from trivium.data import build_task_data
from trivium.data.reasoning_gym_tasks import generate_reasoning_gym, parse_options
from trivium.errors import UserError

SMALL_SUMS = {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+"], "allow_parentheses": False}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rows_carry_the_entry_that_score_answer_needs(tmp_path):
    out = build_task_data("reasoning_gym:gcd", tmp_path, seed=3, num_train=6, num_test=4, max_value=50)
    rows = read_jsonl(out / "train.jsonl") + read_jsonl(out / "test.jsonl")
    assert len(rows) == 10
    dataset = reasoning_gym.create_dataset("gcd", seed=3, size=100, max_value=50)
    for row in rows:
        ground_truth = json.loads(row["response"])
        assert ground_truth["dataset"] == row["dataset"] == "gcd"
        assert ground_truth["config"] == {"max_value": 50}
        entry = ground_truth["entry"]
        # The stored entry is the dataset's own item for this row's seed, metadata included.
        original = dataset[row["item_seed"] - 3]
        assert entry["question"] == row["prompt"] == original["question"]
        assert entry["answer"] == row["reference_answer"] == original["answer"]
        assert entry["metadata"]["numbers"] == original["metadata"]["numbers"]
        assert row["sft_response"] == f"<answer>{row['reference_answer']}</answer>"
        assert dataset.score_answer(row["reference_answer"], entry) == 1.0
        numbers = entry["metadata"]["numbers"]
        assert all(number % int(row["reference_answer"]) == 0 for number in numbers)


def test_same_seed_writes_the_same_rows_and_another_seed_other_rows(tmp_path):
    first = build_task_data(
        "reasoning_gym:basic_arithmetic", tmp_path / "a", seed=5, num_train=20, num_test=5
    )
    again = build_task_data(
        "reasoning_gym:basic_arithmetic", tmp_path / "b", seed=5, num_train=20, num_test=5
    )
    other = build_task_data(
        "reasoning_gym:basic_arithmetic", tmp_path / "c", seed=6, num_train=20, num_test=5
    )
    for split in ("train", "test"):
        assert (first / f"{split}.jsonl").read_text() == (again / f"{split}.jsonl").read_text()
    assert (first / "train.jsonl").read_text() != (other / "train.jsonl").read_text()


def test_train_and_test_share_no_item_seed_and_no_question(tmp_path):
    # 1-digit sums have only 81-100 distinct questions: repeats must be skipped, not split.
    out = build_task_data(
        "reasoning_gym:basic_arithmetic", tmp_path, seed=0, num_train=50, num_test=20, **SMALL_SUMS
    )
    train, test = read_jsonl(out / "train.jsonl"), read_jsonl(out / "test.jsonl")
    assert len(train) == 50 and len(test) == 20
    assert {row["item_seed"] for row in train}.isdisjoint(row["item_seed"] for row in test)
    assert {row["prompt"] for row in train}.isdisjoint(row["prompt"] for row in test)
    assert len({row["prompt"] for row in train + test}) == 70
    # Train takes the first items (seeds 0, 1, ...); test only later ones.
    assert train[0]["item_seed"] == 0 and max(r["item_seed"] for r in train) < min(
        r["item_seed"] for r in test
    )


def test_unknown_dataset_is_refused_with_close_names(tmp_path):
    with pytest.raises(UserError) as refused:
        build_task_data("reasoning_gym:basic_arithmatic", tmp_path)
    message = str(refused.value)
    assert "reasoning-gym has no dataset 'basic_arithmatic'" in message
    assert "Did you mean: basic_arithmetic" in message
    assert not (tmp_path / "train.jsonl").exists()


def test_config_options_are_checked_against_the_dataset(tmp_path):
    with pytest.raises(UserError, match="do not apply to task 'reasoning_gym:gcd'; it accepts: min_numbers"):
        build_task_data("reasoning_gym:gcd", tmp_path, max_valu=10)
    with pytest.raises(UserError, match="rejects config .*min_numbers must be at least 2"):
        build_task_data("reasoning_gym:gcd", tmp_path, min_numbers=1)
    with pytest.raises(UserError, match="gave only 19 distinct questions of the 30"):
        generate_reasoning_gym("basic_arithmetic", 30, 0, {"min_terms": 1, "max_terms": 1, "max_digits": 1})


def test_option_values_read_as_json_else_text():
    assert parse_options(
        ["max_terms=2", 'operators=["+", "-"]', "allow_negation=false", "format_style=simple"]
    ) == {
        "max_terms": 2,
        "operators": ["+", "-"],
        "allow_negation": False,
        "format_style": "simple",
    }
    with pytest.raises(UserError, match="--option takes KEY=VALUE, got 'max_terms'"):
        parse_options(["max_terms"])


def test_cli_writes_parquet_rows_with_options(tmp_path, capsys):
    out = tmp_path / "rg"
    args = [
        "init",
        "data",
        "--task",
        "reasoning_gym:basic_arithmetic",
        "--out",
        str(out),
        "--format",
        "parquet",
    ]
    options = ["--option", "max_terms=2", "--option", "max_digits=1", "--option", 'operators=["+"]']
    assert main([*args, "--num-train", "8", "--num-test", "2", *options]) == 0
    assert "wrote 8 train and 2 test reasoning_gym:basic_arithmetic rows" in capsys.readouterr().out
    test = datasets.load_dataset(str(out), split="test")
    assert len(test) == 2
    config = json.loads(test[0]["response"])["config"]
    assert config == {"max_terms": 2, "max_digits": 1, "operators": ["+"]}
    assert " + " in test[0]["prompt"] and " - " not in test[0]["prompt"]


def test_cli_refuses_option_for_other_tasks(tmp_path, capsys):
    assert (
        main(["init", "data", "--task", "arithmetic", "--out", str(tmp_path), "--option", "max_terms=2"]) == 2
    )
    assert "--option only applies to --task reasoning_gym:NAME" in capsys.readouterr().err


def test_dataset_whose_metadata_changes_in_json_is_refused(tmp_path):
    # rearc keeps tuples in its metadata; read back from JSON they are lists, and its verifier
    # then scores even the reference answer 0.05 instead of 1.
    with pytest.raises(UserError, match="'rearc' keeps metadata that does not survive being written as JSON"):
        build_task_data("reasoning_gym:rearc", tmp_path, num_train=2, num_test=1)
