"""``trivium plan --check-data`` reads every dataset and lists the rows a run would skip."""

from __future__ import annotations

import copy

import yaml

from trivium.cli.main import main

CONFIG = {
    "project": "demo", "name": "check",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
    "model": {"model_path": "/models/tiny", "max_prompt_tokens": 16, "max_response_tokens": 16},
    "cluster": {"gpu_per_node": 0},
    "buffer": {"batch_size": 2, "explorer_input": {}},
}


def config_with(tmp_path, tasksets, eval_tasksets=()):
    data = copy.deepcopy(CONFIG)
    data["checkpoint_root_dir"] = str(tmp_path / "runs")
    data["buffer"]["explorer_input"] = {
        "tasksets": [{"name": name, "path": str(path), "format": {"prompt_key": "q"}} for name, path in tasksets],
        "eval_tasksets": [{"name": name, "path": str(path), "format": {"prompt_key": "q"}}
                          for name, path in eval_tasksets],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_check_data_lists_bad_rows_by_line_and_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train = tmp_path / "train.jsonl"
    train.write_bytes(b'{"q": "a"}\n{"q": \n{"x": 1}\n{"q": "b"}\n')
    held_out = tmp_path / "test.jsonl"
    held_out.write_bytes(b"nope\n")
    status = main(["plan", "--config", str(config_with(tmp_path, [("train", train)], [("held_out", held_out)])),
                   "--check-data"])
    out = capsys.readouterr().out
    assert status == 1
    assert f"taskset 'train' ({train}): 2 usable rows, 2 bad" in out
    assert f"  - {train} line 2: not valid JSON" in out
    assert f"  - {train} line 3: missing 'q' (format.prompt_key)" in out
    assert (f"eval taskset 'held_out' ({held_out}): UNREADABLE: Dataset 'held_out': {held_out} has no usable rows; "
            f"all 1 are bad, the first: {held_out} line 1: not valid JSON") in out


def test_check_data_passes_on_clean_data(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train = tmp_path / "train.jsonl"
    train.write_text('{"q": "a"}\n{"q": "b"}\n')
    assert main(["plan", "--config", str(config_with(tmp_path, [("train", train)])), "--check-data"]) == 0
    assert "2 usable rows, 0 bad" in capsys.readouterr().out


def test_non_utf8_config_file_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"mode: colocate\nname: \"caf\xe9\"\n")
    assert main(["plan", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"in {path}: the file is not UTF-8 text: line 2, column 11 has byte 0xe9" in err


def test_an_empty_taskset_file_is_a_config_error_naming_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train = tmp_path / "train.jsonl"
    train.write_text("\n")
    assert main(["plan", "--config", str(config_with(tmp_path, [("train", train)]))]) == 2
    err = capsys.readouterr().err
    assert f"buffer.explorer_input.tasksets[0].path: taskset 'train' at {train} has no rows (the data is empty)" in err
