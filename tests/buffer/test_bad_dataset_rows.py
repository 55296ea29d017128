"""Bad dataset input: every broken row is skipped and reported by line, or the file is refused."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trivium.buffer.task_reader import TaskReader
from trivium.errors import UserError

from .conftest import storage


def jsonl_taskset(tmp_path, content: bytes, **fields):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(content)
    return storage("t", storage_type="file", path=str(path), format={"prompt_key": "question"}, **fields), path


GOOD = b'{"question": "q0"}\n'


def test_malformed_json_line_is_skipped_and_reported_by_line_number(tmp_path, caplog):
    config, path = jsonl_taskset(tmp_path, GOOD + b'{"question": "q1"\n\n' + b'[1, 2]\n' + b'{"question": "q4"}\n')
    reader = TaskReader(config)
    assert [t.prompt for t in reader.read(10)] == ["q0", "q4"]
    assert reader.skipped_rows == 2
    assert [str(bad) for bad in reader.bad_rows] == [
        f"{path} line 2: not valid JSON (Expecting ',' delimiter at column 18)",
        f"{path} line 4: not a JSON object (a list)",
    ]
    assert "skipped 2 of 4 rows" in caplog.text and "line 2" in caplog.text


def test_strict_reader_rejects_the_first_bad_line_naming_file_and_line(tmp_path):
    config, path = jsonl_taskset(tmp_path, GOOD + b"{oops\n")
    with pytest.raises(UserError, match=rf"{path} line 2: not valid JSON"):
        TaskReader(config, strict=True)


def test_non_utf8_bytes_are_reported_with_line_and_column(tmp_path):
    config, path = jsonl_taskset(tmp_path, GOOD + b'{"question": "\xff"}\n' + GOOD)
    reader = TaskReader(config)
    assert len(reader) == 2
    assert str(reader.bad_rows[0]) == f"{path} line 2: not UTF-8 text (byte 0xff at column 15)"


def test_row_without_prompt_key_is_counted_with_its_line(tmp_path):
    config, path = jsonl_taskset(tmp_path, GOOD + b'{"answer": "1"}\n')
    reader = TaskReader(config)
    assert len(reader) == 1
    assert str(reader.bad_rows[0]) == f"{path} line 2: missing 'question' (format.prompt_key); its keys are ['answer']"


def test_a_100k_character_row_is_skipped_over_max_row_chars(tmp_path):
    long_row = b'{"question": "' + b"x" * 100_000 + b'"}\n'
    config, path = jsonl_taskset(tmp_path, GOOD + long_row)
    reader = TaskReader(config)
    assert len(reader) == 1
    assert str(reader.bad_rows[0]) == f"{path} line 2: 100016 characters, over the limit of 50000 (max_row_chars)"
    unlimited, _ = jsonl_taskset(tmp_path, GOOD + long_row, max_row_chars=None)
    assert len(TaskReader(unlimited)) == 2


def test_empty_jsonl_file_is_a_clear_error_not_stop_iteration(tmp_path):
    config, path = jsonl_taskset(tmp_path, b"")
    with pytest.raises(UserError, match=rf"Dataset 't': {path} is empty \(no rows\)"):
        TaskReader(config)


def test_file_of_only_bad_lines_names_the_first(tmp_path):
    config, path = jsonl_taskset(tmp_path, b"nope\nnope\n")
    with pytest.raises(UserError, match=rf"all 2 are bad, the first: {path} line 1: not valid JSON"):
        TaskReader(config)


def test_empty_and_truncated_parquet_files_are_clear_errors(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"question": [f"question {i}" for i in range(200)]}), good)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    config = storage("p", storage_type="file", path=str(truncated), format={"prompt_key": "question"})
    with pytest.raises(UserError, match=rf"Dataset 'p': cannot read {truncated}.*truncated or corrupt"):
        TaskReader(config)
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match=rf"Dataset 'p': {empty} is empty"):
        TaskReader(storage("p", storage_type="file", path=str(empty)))
    assert len(TaskReader(storage("p", storage_type="file", path=str(good), format={"prompt_key": "question"}))) == 200


def test_dataset_directory_of_jsonl_files_reports_each_file(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "train-0.jsonl").write_bytes(GOOD + b"bad\n")
    (folder / "train-1.jsonl").write_bytes(b"bad\n" + GOOD)
    reader = TaskReader(storage("d", storage_type="file", path=str(folder), format={"prompt_key": "question"}))
    assert len(reader) == 2
    assert [bad.where for bad in reader.bad_rows] == [f"{folder / 'train-0.jsonl'} line 2",
                                                      f"{folder / 'train-1.jsonl'} line 1"]


def test_experience_file_with_non_utf8_bytes_names_the_line(tmp_path):
    from trivium.buffer.codec import experience_to_json
    from trivium.buffer.file_storage import JsonlReader

    from .conftest import experience

    path = tmp_path / "experiences.jsonl"
    path.write_bytes((experience_to_json(experience(0)) + "\n").encode() + b'{"eid": "\xfe"}\n')
    reader = JsonlReader(path)
    with pytest.raises(UserError, match=rf"{path} line 2 is not UTF-8 text \(byte 0xfe at column 10\)"):
        reader.read(5)


def test_unwritable_experience_file_is_a_clear_error(tmp_path):
    from trivium.buffer.file_storage import JsonlWriter

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(UserError, match=rf"Cannot write the experience file {blocker}/out.jsonl: .*writable place"):
        JsonlWriter(blocker / "out.jsonl")


@pytest.mark.parametrize("name, content, where", [
    ("tasks.csv", b"question,answer\nq\xff,1\n", "line 2, column 2 has byte 0xff"),
    ("tasks.json", b'[{"question": "ok"},\n {"question": "\xe9"}]', "line 2, column 16 has byte 0xe9"),
])
def test_non_utf8_csv_and_json_files_name_line_and_column(tmp_path, name, content, where):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError, match=rf"Dataset 't': {path} is not UTF-8 text: {where}; save it as UTF-8"):
        TaskReader(storage("t", storage_type="file", path=str(path), format={"prompt_key": "question"}))


def test_rows_name_their_own_workflow_and_reward_and_an_unknown_name_is_a_bad_row(tmp_path):
    rows = (
        b'{"question": "q0", "kind": "math", "scorer": "countdown_reward"}\n'
        b'{"question": "q1", "kind": ""}\n'
        b'{"question": "q2", "kind": "maths"}\n'
        b'{"question": "q3", "scorer": "no_such_reward"}\n'
    )
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(rows)
    fmt = {"prompt_key": "question", "workflow_key": "kind", "reward_fn_key": "scorer"}
    config = storage("t", storage_type="file", path=str(path), format=fmt,
                     default_workflow_type="simple", default_reward_fn_type="math_reward")
    reader = TaskReader(config)
    tasks = reader.read(10)
    assert [(t.prompt, t.workflow, t.reward_fn) for t in tasks] == [
        ("q0", "math", "countdown_reward"), ("q1", "simple", "math_reward"),
    ]
    workflow_row, reward_row = (str(bad) for bad in reader.bad_rows)
    assert workflow_row.startswith(f"{path} line 3: 'kind' (format.workflow_key): Unknown workflow 'maths'. Did you mean 'math'?")
    assert reward_row.startswith(f"{path} line 4: 'scorer' (format.reward_fn_key): Unknown reward function 'no_such_reward'")
    with pytest.raises(UserError, match=r"line 3: 'kind' \(format.workflow_key\): Unknown workflow 'maths'"):
        TaskReader(config, strict=True)
