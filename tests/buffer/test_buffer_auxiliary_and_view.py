import pytest

from trivium.buffer import create_reader, create_writer
from trivium.buffer.auxiliary import AuxiliaryBufferReader
from trivium.cli.main import main
from trivium.errors import UserError

from .conftest import experience, storage
from .test_buffer_task_reader import write_taskset


def sft_storage(tmp_path, rows, **fmt):
    path = write_taskset(tmp_path / "sft", rows)
    return storage("sft_data", storage_type="file", path=str(path),
                   format={"prompt_key": "question", "response_key": "answer", **fmt})


def test_auxiliary_sft_cycles_epochs(tmp_path, tokenizer):
    rows = [{"question": "two plus three ?", "answer": "five"}, {"question": "hi", "answer": "hello"}]
    reader = create_reader(sft_storage(tmp_path, rows), tokenizer=tokenizer)
    assert isinstance(reader, AuxiliaryBufferReader) and reader.kind == "sft"
    batch = reader.read(3)
    assert reader.epoch == 1
    trained = [tokenizer.convert_ids_to_tokens(e.response_tokens[e.action_mask].tolist()) for e in batch]
    assert trained == [["five", "<|im_end|>"], ["hello", "<|im_end|>"], ["five", "<|im_end|>"]]
    state = reader.state_dict()
    again = create_reader(sft_storage(tmp_path, rows), tokenizer=tokenizer)
    again.load_state_dict(state)
    assert again.read(1)[0].response_tokens.tolist() == reader.read(1)[0].response_tokens.tolist()


def test_auxiliary_rows_are_formatted_once_and_later_epochs_get_equal_fresh_copies(tmp_path, tokenizer, monkeypatch):
    rows = [{"question": "two plus three ?", "answer": "five"}, {"question": "hi", "answer": "hello"}]
    reader = create_reader(sft_storage(tmp_path, rows), tokenizer=tokenizer)
    first = reader.read(2)
    renders = []
    monkeypatch.setattr(reader.formatter, "format", lambda row: renders.append(row))
    second = reader.read(2)
    assert renders == [], "the second epoch reused the first one's tokens"
    by_tokens = {tuple(e.tokens.tolist()): e for e in first}
    assert len(by_tokens) == 2 and len(second) == 2
    for again in second:
        before = by_tokens[tuple(again.tokens.tolist())]
        assert again.prompt_length == before.prompt_length
        assert again.action_mask.tolist() == before.action_mask.tolist()
        assert again.eid != before.eid
        again.tokens[0] = -1  # the trainer may annotate what it reads; the kept row stays as it was
        again.info["seen"] = True
    third = reader.read(2)
    assert all(e.tokens[0] != -1 and "seen" not in e.info for e in third)


def test_auxiliary_rows_beyond_the_budget_are_formatted_each_time(tmp_path, tokenizer, monkeypatch):
    import trivium.buffer.auxiliary as auxiliary

    rows = [{"question": "two plus three ?", "answer": "five"}, {"question": "hi", "answer": "hello"}]
    reader = create_reader(sft_storage(tmp_path, rows), tokenizer=tokenizer)
    monkeypatch.setattr(auxiliary, "FORMATTED_TOKEN_BUDGET", 0)
    first = sorted(e.tokens.tolist() for e in reader.read(2))
    assert reader._formatted == {}, "nothing is kept beyond the budget"
    assert sorted(e.tokens.tolist() for e in reader.read(2)) == first


def test_auxiliary_dpo_detected_from_columns(tmp_path, tokenizer):
    rows = [{"question": "hi", "chosen": "hello", "rejected": "bye"}]
    reader = create_reader(sft_storage(tmp_path, rows), tokenizer=tokenizer)
    assert reader.kind == "dpo"
    chosen, rejected, *rest = reader.read(2)
    assert chosen.group_id == rejected.group_id and len(rest) == 2


def test_auxiliary_bad_row_names_the_row(tmp_path, tokenizer):
    rows = [{"question": "hi", "answer": "hello"}, {"question": "ok"}]
    reader = create_reader(sft_storage(tmp_path, rows), tokenizer=tokenizer)
    with pytest.raises(UserError, match=r"Auxiliary buffer '\w+' .*\.jsonl line 2: row has no 'answer'"):
        reader.read(2)


def test_view_lists_experiences(tmp_path, capsys):
    db = tmp_path / "buffer.db"
    create_writer(storage("exp", storage_type="sql", path=str(db))).write(
        [experience(i, reward=0.25 * i, model_version=3) for i in range(5)])
    assert main(["view", "--db", f"sqlite:///{db}", "--limit", "2", "--offset", "1"]) == 0
    out = capsys.readouterr().out
    assert "prompt 1" in out and "response 2" in out and "0.250" in out
    assert "prompt 0" not in out and "response 3" not in out
    assert "5 experience(s)" in out and "of 5" in out


def test_view_truncates_long_text(tmp_path, capsys):
    db = tmp_path / "long.db"
    long = experience(0)
    long.response_text = "word " * 200
    create_writer(storage("exp", storage_type="sql", path=str(db))).write([long])
    assert main(["view", "--db", str(db), "--width", "30"]) == 0
    assert "word word" in (out := capsys.readouterr().out) and out.count("word") < 40


def test_view_reports_bad_databases(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 500)
    assert main(["view", "--db", str(bad)]) == 2
    assert "corrupt" in capsys.readouterr().err
    assert main(["view", "--db", str(tmp_path / "missing.db")]) == 2
