"""A bad model_path is a message naming the key and what to do, for the engine and the trainer."""

import shutil

import pytest

from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.model_dir import check_model_dir
from trivium.trainer.settings import TrainerSettings
from trivium.trainer.trainer import Trainer


def load_engine(path):
    return create_engine("hf", model_path=str(path))


def load_trainer(path, tmp_path):
    return Trainer(TrainerSettings(model_path=str(path)), run_dir=tmp_path / "run")


@pytest.mark.parametrize("load", [load_engine, load_trainer], ids=["engine", "trainer"])
def test_missing_directory(load, tmp_path):
    with pytest.raises(UserError, match=rf"model.model_path='{tmp_path}/nope': no such directory; build one with "
                                        r"`trivium init model --out DIR`"):
        load(tmp_path / "nope") if load is load_engine else load(tmp_path / "nope", tmp_path)


@pytest.mark.parametrize("load", [load_engine, load_trainer], ids=["engine", "trainer"])
def test_hub_name_says_there_is_no_hub(load, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = (r"model.model_path='Qwen/Qwen2.5-0.5B-Instruct': no such directory \(relative to .*\)\. "
               r"It looks like a Hugging Face Hub name, but there is no hub here: models are never downloaded")
    with pytest.raises(UserError, match=message):
        load("Qwen/Qwen2.5-0.5B-Instruct") if load is load_engine else load("Qwen/Qwen2.5-0.5B-Instruct", tmp_path)


@pytest.mark.parametrize("load", [load_engine, load_trainer], ids=["engine", "trainer"])
def test_directory_without_a_model(load, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.jsonl").write_text("{}\n")
    with pytest.raises(UserError, match=r"is not a model directory: it has no config.json"):
        load(folder) if load is load_engine else load(folder, tmp_path)


def test_a_file_is_not_a_model_directory(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    with pytest.raises(UserError, match=r"is a file; it must be a model directory"):
        load_engine(file)


def test_weights_and_tokenizer_are_required(tiny_model_dir, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    assert check_model_dir(copy, needs_tokenizer=True) == copy
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).unlink()
    with pytest.raises(UserError, match=r"has no tokenizer"):
        load_engine(copy)
    for weights in copy.glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(UserError, match=r"has a config.json but no weights"):
        check_model_dir(copy, key="model.critic_model_path")
