"""tool_arithmetic rows: right answers, disjoint splits, transcripts with careless first calls."""

import json
import random

import pytest

from trivium.cli.main import main
from trivium.data.tool_arithmetic import generate_tool_arithmetic, tool_arithmetic_row
from trivium.envs.calculator import CALCULATOR_TOOL
from trivium.errors import UserError


def test_a_row_holds_the_question_answer_tool_and_a_calling_transcript():
    row = tool_arithmetic_row(47, "*", 86)
    assert (row["question"], row["answer"], row["expression"]) == ("What is 47 * 86?", "4042", "47 * 86")
    assert row["tools"] == [CALCULATOR_TOOL]
    user, call, tool, answer = row["messages"]
    assert user == {"role": "user", "content": "What is 47 * 86?"}
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"expression": "47 * 86"}
    assert tool["content"] == "4042" and answer == {"role": "assistant", "content": "4042"}


def test_a_careless_transcript_misnames_the_argument_reads_the_error_and_calls_again():
    _user, wrong, error, call, result, answer = tool_arithmetic_row(12, "+", 30, careless=True)["messages"]
    assert json.loads(wrong["tool_calls"][0]["function"]["arguments"]) == {"expr": "12 + 30"}
    assert error["content"] == 'error: the arguments must be {"expression": "..."}'
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"expression": "12 + 30"}
    assert result["content"] == answer["content"] == "42"


def test_careless_share_of_transcripts():
    rows = generate_tool_arithmetic(400, random.Random(0), careless_share=0.75)
    careless = sum(len(row["messages"]) == 6 for row in rows)
    assert 270 <= careless <= 330  # binomial(400, 0.75): mean 300, standard deviation 8.7
    assert all(
        len(row["messages"]) == 4 for row in generate_tool_arithmetic(50, random.Random(0), careless_share=0)
    )
    with pytest.raises(UserError, match="--careless-share must be between 0 and 1"):
        generate_tool_arithmetic(5, random.Random(0), careless_share=1.5)


def test_init_data_writes_disjoint_splits_and_reads_a_zero_share(tmp_path):
    out = tmp_path / "data"
    argv = ["init", "data", "--task", "tool_arithmetic", "--out", str(out), "--num-train", "60"]
    assert main([*argv, "--num-test", "20", "--careless-share", "0"]) == 0
    train = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    test = [json.loads(line) for line in (out / "test.jsonl").read_text().splitlines()]
    assert len(train) == 60 and len(test) == 20
    assert not {row["question"] for row in train} & {row["question"] for row in test}
    assert all(len(row["messages"]) == 4 for row in train)  # 0 is a value, not "unset"
    for row in train + test:
        a, op, b = row["expression"].split()
        assert int(row["answer"]) == (int(a) + int(b) if op == "+" else int(a) * int(b))
