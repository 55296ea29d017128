"""Checkpoints survive a kill during a re-save, and broken ones are refused with a reason."""

import logging
import os
import shutil

import pytest

from trivium.errors import UserError
from trivium.trainer import checkpoint as ckpt
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences


@pytest.fixture(scope="module")
def template(tiny_model_dir, tmp_path_factory):
    """A run directory with checkpoints at steps 1 and 2 (written once, copied per test)."""
    settings = TrainerSettings(model_path=tiny_model_dir, lr=1e-3, micro_batch_size=4,
                               loss=LossSettings(policy_loss_fn="ppo"))
    run_dir = tmp_path_factory.mktemp("template")
    trainer = Trainer(settings, run_dir=run_dir)
    for _ in range(2):
        trainer.train_step(make_experiences())
        trainer.save_checkpoint(export_hf=False)
    return trainer, settings, run_dir


@pytest.fixture
def trained(template, tmp_path):
    trainer, settings, run_dir = template
    shutil.copytree(run_dir, tmp_path, dirs_exist_ok=True)
    trainer.run_dir = tmp_path
    return trainer, settings


def test_resaving_a_step_keeps_the_old_copy_until_the_new_one_is_in(trained, tmp_path, monkeypatch):
    trainer, _ = trained
    old_marker = tmp_path / "global_step_2" / "marker"
    old_marker.write_text("old")
    real_replace = os.replace
    calls = []

    def killed_before_the_second_rename(source, target):
        calls.append((os.path.basename(source), os.path.basename(target)))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")  # the process dies between the two renames
        real_replace(source, target)

    monkeypatch.setattr(ckpt.os, "replace", killed_before_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        trainer.save_checkpoint(export_hf=False)
    monkeypatch.setattr(ckpt.os, "replace", real_replace)
    assert calls == [("global_step_2", "global_step_2.old"), ("global_step_2.tmp", "global_step_2")]
    assert not (tmp_path / "global_step_2").exists() and (tmp_path / "global_step_2.old" / "marker").exists()

    # On the next start the complete new copy is moved in and the old one removed.
    assert ckpt.recover_interrupted_save(tmp_path) == [2]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("global_step_2")) == ["global_step_2"]
    assert not (tmp_path / "global_step_2" / "marker").exists()
    assert ckpt.latest_checkpoint(tmp_path) == 2


def test_an_incomplete_new_copy_brings_the_old_one_back(trained, tmp_path):
    os.replace(tmp_path / "global_step_2", tmp_path / "global_step_2.old")
    (tmp_path / "global_step_2.tmp" / "actor").mkdir(parents=True)  # the new copy was still being written
    assert ckpt.recover_interrupted_save(tmp_path) == [2]
    assert ckpt.checkpoint_problem(tmp_path, 2) is None
    assert not (tmp_path / "global_step_2.old").exists()


def test_a_resave_replaces_the_old_directory(trained, tmp_path):
    trainer, _ = trained
    (tmp_path / "global_step_2" / "marker").write_text("old")
    trainer.save_checkpoint(export_hf=False)
    assert not (tmp_path / "global_step_2" / "marker").exists()
    assert not (tmp_path / "global_step_2.old").exists() and not (tmp_path / "global_step_2.tmp").exists()
    assert (tmp_path / ckpt.LATEST_FILE).read_text() == "2"


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda d: truncate(d / "actor" / "model.safetensors"), "actor/model.safetensors is truncated or corrupt"),
        (lambda d: truncate(d / "actor" / "optimizer.pt"), "actor/optimizer.pt is missing or truncated"),
        (lambda d: (d / "actor" / "trainer_state.json").write_text("{"), "actor/trainer_state.json is unreadable"),
        (lambda d: (d / "actor" / "config.json").unlink(), "actor/config.json is missing"),
    ],
)
def test_a_broken_checkpoint_is_refused_and_the_previous_one_used(trained, tmp_path, caplog, damage, reason):
    _, settings = trained
    damage(tmp_path / "global_step_2")
    with caplog.at_level(logging.WARNING):
        assert ckpt.valid_checkpoints(tmp_path) == [1]
        assert ckpt.latest_checkpoint(tmp_path) == 1
    assert f"skipping checkpoint {tmp_path / 'global_step_2'}: {reason}" in caplog.text
    resumed = Trainer(settings, run_dir=tmp_path)
    with pytest.raises(UserError, match=rf"global_step_2 cannot be loaded: {reason}.*the newest readable one is global_step_1"):
        resumed.load_checkpoint(2)
    resumed.load_checkpoint(1)
    assert resumed.global_step == 1
