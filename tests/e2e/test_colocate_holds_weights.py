"""colocate, synced every step: the engine computes with the trainer's own tensors, and the run
is the same, number for number, as one whose engine copies them at every sync."""

import json

from trivium.cli.main import main
from trivium.runtime.session import RunSession

from .conftest import base_config, read_metrics, write_config
from .ray_helpers import short_answer_plugin

COMPARED = ("rollout/reward_mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "sync/max_logprob_diff")


def run(tmp_path, assets, name):
    config = base_config(assets, tmp_path / name, **{
        "buffer.total_steps": 4, "algorithm.optimizer.lr": 5e-3,
        "buffer.explorer_input.default_reward_fn_type": "short_answer",  # rewards that differ: weights move
        "explorer.runner_per_model": 1,  # one order of engine calls: the same samples from the same weights
    })
    plugins = tmp_path / name / "plugins"
    plugins.parent.mkdir(parents=True)
    arguments = ["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(short_answer_plugin(plugins.parent))]
    assert main(arguments) == 0
    run_dir = tmp_path / name / "e2e" / "run"
    records = read_metrics(run_dir)
    return run_dir, {key: [r[key] for r in records if key in r] for key in COMPARED}


def test_holding_the_trainers_weights_changes_no_number(tmp_path, assets, monkeypatch, one_torch_thread):
    held_dir, held = run(tmp_path, assets, "held")
    assert "compute with the trainer's weights" in (held_dir / "log" / "explorer.log").read_text()
    monkeypatch.setattr(RunSession, "_engines_may_hold_trainer_weights", lambda self: False)
    copied_dir, copied = run(tmp_path, assets, "copied")
    assert "compute with the trainer's weights" not in (copied_dir / "log" / "explorer.log").read_text()
    assert len(held["rollout/reward_mean"]) == 4 and len(held["actor/pg_loss"]) == 4
    assert min(held["actor/grad_norm"]) > 1e-3, "the weights move at every step"
    assert held == copied, json.dumps({"held": held, "copied": copied})


def test_engines_copy_the_weights_when_the_trainer_runs_ahead(tmp_path, assets):
    config = base_config(assets, tmp_path / "runs", **{"buffer.total_steps": 2, "synchronizer.sync_interval": 2})
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    assert "compute with the trainer's weights" not in (tmp_path / "runs" / "e2e" / "run" / "log" / "explorer.log").read_text()
