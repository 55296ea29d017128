import json
import random

import datasets
import pytest

from trivium.cli.main import main
from trivium.data import build_task_data
from trivium.data.arithmetic import generate_arithmetic
from trivium.data.countdown import Expression, combine, generate_countdown
from trivium.errors import UserError
from trivium.rewards.countdown import countdown_reward, evaluate_equation
from trivium.rewards.math_rewards import math_reward


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_arithmetic_rows_are_correct_and_sft_ready():
    rows = generate_arithmetic(200, random.Random(0), subtraction=True)
    operators = set()
    for row in rows:
        _, _, a, op, b = row["question"].rstrip("?").split()
        operators.add(op)
        expected = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert 10 <= int(a) <= 99 and 10 <= int(b) <= 99
        assert row["answer"] == str(expected) and expected >= 0
        assert row["response"] == f"<answer>{expected}</answer>"
        assert (
            math_reward(prompt=row["question"], response=row["response"], ground_truth=row["answer"])[
                "reward"
            ]
            == 1
        )
    assert operators == {"+", "-"}
    assert len({row["question"] for row in rows}) == 200


def test_countdown_solutions_are_valid_and_reach_the_target():
    rows = generate_countdown(300, random.Random(1), num_numbers=4)
    keys = set()
    for row in rows:
        truth = json.loads(row["answer"])
        assert truth == {"target": row["target"], "numbers": row["numbers"]}
        assert len(row["numbers"]) == 4 and 1 <= row["target"] <= 100
        assert countdown_reward(
            prompt=row["question"], response=row["response"], ground_truth=row["answer"]
        ) == {
            "reward": 1.0,
            "accuracy": 1.0,
            "format": 1.0,
        }
        keys.add((tuple(sorted(row["numbers"])), row["target"]))
    assert len(keys) == 300


@pytest.mark.parametrize(
    "left, op, right, text, value",
    [
        (("1 + 2", 3, 1), "*", ("4", 4, 3), "(1 + 2) * 4", 12),
        (("9", 9, 3), "-", ("3 - 1", 2, 1), "9 - (3 - 1)", 7),
        (("9", 9, 3), "+", ("3 - 1", 2, 1), "9 + 3 - 1", 11),
        (("8", 8, 3), "/", ("2 * 2", 4, 2), "8 / (2 * 2)", 2),
        (("8", 8, 3), "-", ("2 * 2", 4, 2), "8 - 2 * 2", 4),
    ],
)
def test_combine_adds_only_needed_parentheses(left, op, right, text, value):
    result = combine(Expression(*left), op, Expression(*right))
    assert (result.text, result.value) == (text, value)
    assert evaluate_equation(result.text)[0] == value


@pytest.mark.parametrize("task", ["arithmetic", "countdown"])
def test_splits_load_with_datasets_and_are_disjoint(tmp_path, task):
    build_task_data(task, tmp_path, seed=5, num_train=300, num_test=40)
    train = datasets.load_dataset(str(tmp_path), split="train")
    test = datasets.load_dataset(str(tmp_path), split="test")
    assert (len(train), len(test)) == (300, 40)
    assert {"question", "answer", "response"} <= set(train.column_names)
    assert not set(train["question"]) & set(test["question"])


def test_arithmetic_warmup_split_is_carry_free_and_shares_no_problem_with_the_splits(tmp_path):
    build_task_data("arithmetic", tmp_path / "plain", seed=3, num_train=2000, num_test=200)
    build_task_data("arithmetic", tmp_path / "warm", seed=3, num_train=2000, num_test=200, warmup_split=True)
    assert not (tmp_path / "plain" / "warmup.jsonl").exists()
    drawn = set()
    for split in ("train", "test"):  # the same draw with or without the warm-up split
        plain, warm = (read_jsonl(tmp_path / name / f"{split}.jsonl") for name in ("plain", "warm"))
        assert plain == warm
        drawn |= {operands(row["question"]) for row in warm}
    warmup = read_jsonl(tmp_path / "warm" / "warmup.jsonl")
    # Of the 90 x 90 sums, 55 x 81 have ones digits summing below 10; the drawn ones are left out.
    drawn_carry_free = sum(1 for a, b in drawn if a % 10 + b % 10 < 10)
    assert len(warmup) == 55 * 81 - drawn_carry_free
    for row in warmup:
        a, b = operands(row["question"])
        assert (a, b) not in drawn
        assert a % 10 + b % 10 < 10 and row["response"] == f"<answer>{a + b}</answer>"
    assert datasets.load_dataset(str(tmp_path / "warm"), split="train").num_rows == 2000  # no split's file


def operands(question: str) -> tuple[int, int]:
    a, b = question.removeprefix("What is ").rstrip("?").split(" + ")
    return int(a), int(b)


def test_same_seed_same_bytes_other_seed_other_rows(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        build_task_data("countdown", tmp_path / name, seed=seed, num_train=50, num_test=5)
    assert (tmp_path / "a/train.jsonl").read_bytes() == (tmp_path / "b/train.jsonl").read_bytes()
    assert (tmp_path / "a/test.jsonl").read_bytes() == (tmp_path / "b/test.jsonl").read_bytes()
    assert read_jsonl(tmp_path / "a/train.jsonl") != read_jsonl(tmp_path / "c/train.jsonl")


def test_parquet_holds_the_same_rows_as_jsonl(tmp_path):
    build_task_data("countdown", tmp_path / "j", seed=2, num_train=20, num_test=3)
    build_task_data("countdown", tmp_path / "p", seed=2, num_train=20, num_test=3, fmt="parquet")
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["test.parquet", "train.parquet"]
    from_parquet = datasets.load_dataset(str(tmp_path / "p"), split="train").to_list()
    assert from_parquet == read_jsonl(tmp_path / "j/train.jsonl")


def test_existing_files_need_overwrite(tmp_path):
    build_task_data("arithmetic", tmp_path, num_train=5, num_test=1)
    with pytest.raises(UserError, match="--overwrite"):
        build_task_data("arithmetic", tmp_path, num_train=5, num_test=1, fmt="parquet")
    build_task_data("arithmetic", tmp_path, num_train=5, num_test=1, fmt="parquet", overwrite=True)
    # The old jsonl splits are gone, so load_dataset sees one format only.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.parquet", "train.parquet"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"task": "sudoku"}, "arithmetic, countdown"),
        ({"fmt": "csv"}, "jsonl, parquet"),
        ({"num_train": 9000}, "only 8100 distinct"),
        ({"num_numbers": 4}, "num_numbers"),
        ({"num_train": 0}, "--num-train"),
    ],
)
def test_bad_arguments_say_what_to_fix(tmp_path, kwargs, message):
    arguments = {"task": "arithmetic", "out_dir": tmp_path, **kwargs}
    with pytest.raises(UserError, match=message):
        build_task_data(**arguments)


def test_countdown_space_exhaustion_is_reported(tmp_path):
    with pytest.raises(UserError, match="distinct countdown problems"):
        build_task_data(
            "countdown", tmp_path, num_train=50, num_test=0, num_numbers=2, max_number=2, max_target=3
        )


def test_cli_writes_data_and_rejects_flags_of_the_other_task(tmp_path, capsys):
    out = tmp_path / "arith"
    assert (
        main(
            [
                "init",
                "data",
                "--task",
                "arithmetic",
                "--out",
                str(out),
                "--num-train",
                "30",
                "--num-test",
                "4",
                "--subtraction",
            ]
        )
        == 0
    )
    assert len(read_jsonl(out / "train.jsonl")) == 30 and len(read_jsonl(out / "test.jsonl")) == 4
    assert (
        main(["init", "data", "--task", "arithmetic", "--out", str(tmp_path / "x"), "--num-numbers", "4"])
        == 2
    )
    assert "--num-numbers only apply to --task countdown" in capsys.readouterr().err
    assert (
        main(
            [
                "init",
                "data",
                "--task",
                "countdown",
                "--out",
                str(tmp_path / "cd"),
                "--num-train",
                "10",
                "--num-test",
                "2",
                "--num-numbers",
                "4",
                "--format",
                "parquet",
            ]
        )
        == 0
    )
    assert len(datasets.load_dataset(str(tmp_path / "cd"), split="train")[0]["numbers"]) == 4
