"""The trainer's step, checkpoints and resume on the tiny model."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from trivium.core.experience import Experience
from trivium.trainer import checkpoint as ckpt
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences


def _settings(model_dir, **loss):
    return TrainerSettings(model_path=model_dir, lr=1e-3, micro_batch_size=4, loss=LossSettings(**loss))


def test_first_step_kl_to_reference_is_zero_and_weights_change(tiny_model_dir, tmp_path):
    trainer = Trainer(_settings(tiny_model_dir, policy_loss_fn="ppo", kl_loss_fn="low_var_kl", kl_loss_coef=0.1), run_dir=tmp_path)
    before = {k: v.clone() for k, v in trainer.actor.state_dict().items()}
    metrics = trainer.train_step(make_experiences())
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-7)
    assert trainer.global_step == 1 and trainer.model_version == 1
    changed = [k for k, v in trainer.actor.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "an update must move the weights"
    second = trainer.train_step(make_experiences(seed=1))
    assert second["actor/kl_loss"] > 0


def test_sft_loss_falls_on_a_repeated_batch(tiny_model_dir, tmp_path):
    trainer = Trainer(_settings(tiny_model_dir, policy_loss_fn="sft", advantage_fn=None), run_dir=tmp_path)
    experiences = make_experiences(num_groups=1, group_size=4)
    losses = [trainer.train_step(experiences)["actor/pg_loss"] for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]


def test_positive_advantage_raises_the_logprob_of_its_tokens(tiny_model_dir, tmp_path):
    trainer = Trainer(_settings(tiny_model_dir, policy_loss_fn="ppo"), run_dir=tmp_path)
    good = make_experiences(num_groups=1, group_size=1)[0]
    good.advantages = torch.ones(good.response_length)
    from trivium.core.batch import ExperienceBatch
    from trivium.trainer.forward import response_logprobs

    batch = ExperienceBatch.from_experiences([good])
    with torch.no_grad():
        before = response_logprobs(trainer.actor, batch)[0].sum()
    for _ in range(3):
        trainer.train_step([good])
    with torch.no_grad():
        after = response_logprobs(trainer.actor, batch)[0].sum()
    assert after > before


def test_ppo_critic_trains_and_values_move_toward_returns(tiny_model_dir, tmp_path):
    settings = _settings(tiny_model_dir, policy_loss_fn="ppo", advantage_fn="ppo", advantage_fn_args={"gamma": 1.0, "lam": 1.0})
    settings.use_critic = True
    settings.critic_lr = 1e-3
    trainer = Trainer(settings, run_dir=tmp_path)
    experiences = make_experiences()
    for exp in experiences:
        exp.advantages = None
    losses = [trainer.train_step([e for e in experiences])["critic/vf_loss"] for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0]


def test_checkpoint_roundtrip_resume_and_hf_loading(tiny_model_dir, tmp_path):
    trainer = Trainer(_settings(tiny_model_dir, policy_loss_fn="ppo"), run_dir=tmp_path)
    trainer.train_step(make_experiences())
    path = trainer.save_checkpoint(export_hf=True, extra_files={"explorer_state.json": {"step": 7}})
    assert path == tmp_path / "global_step_1"
    assert json.loads((path / "explorer_state.json").read_text()) == {"step": 7}
    assert (tmp_path / ckpt.LATEST_FILE).read_text() == "1"

    # Outside trivium: the actor directory and the export load with from_pretrained.
    for directory in (path / "actor", path / "actor" / "huggingface"):
        loaded = AutoModelForCausalLM.from_pretrained(directory)
        for name, tensor in loaded.state_dict().items():
            torch.testing.assert_close(tensor, trainer.actor.state_dict()[name])

    resumed = Trainer(_settings(tiny_model_dir, policy_loss_fn="ppo"), run_dir=tmp_path)
    resumed.load_checkpoint(ckpt.latest_checkpoint(tmp_path))
    assert resumed.global_step == 1
    assert resumed.optimizer.state_dict()["state"].keys() == trainer.optimizer.state_dict()["state"].keys()
    # The same next batch gives the same update from the original and the resumed trainer.
    batch = make_experiences(seed=3)
    trainer.train_step([Experience(**e.to_dict()) for e in batch])
    resumed.train_step([Experience(**e.to_dict()) for e in batch])
    for name, tensor in resumed.actor.state_dict().items():
        torch.testing.assert_close(tensor, trainer.actor.state_dict()[name], rtol=1e-5, atol=1e-6)


def test_pruning_keeps_newest_and_ignores_incomplete(tiny_model_dir, tmp_path):
    trainer = Trainer(_settings(tiny_model_dir, policy_loss_fn="ppo"), run_dir=tmp_path)
    for _ in range(3):
        trainer.train_step(make_experiences())
        trainer.save_checkpoint(export_hf=False)
    (tmp_path / "global_step_9.tmp" / "actor").mkdir(parents=True)  # a save killed midway
    assert ckpt.list_checkpoints(tmp_path) == [1, 2, 3]
    assert ckpt.prune_checkpoints(tmp_path, keep=2) == [1]
    assert ckpt.latest_checkpoint(tmp_path) == 3


def test_staleness_control_drops_old_experiences(tiny_model_dir, tmp_path):
    settings = _settings(tiny_model_dir, policy_loss_fn="ppo")
    settings.staleness_limit = 1
    trainer = Trainer(settings, run_dir=tmp_path)
    trainer.global_step = 5
    experiences = make_experiences()
    for i, exp in enumerate(experiences):
        exp.model_version = 5 if i % 2 else 1
    metrics = trainer.train_step(experiences)
    assert metrics["staleness/dropped"] == len(experiences) / 2
    assert metrics["staleness/max"] == 4


@pytest.mark.parametrize("truncation, trains", [("mask", False), ("keep", True)])
def test_truncated_episodes_follow_the_truncation_setting(tiny_model_dir, tmp_path, truncation, trains):
    settings = _settings(tiny_model_dir, policy_loss_fn="ppo")
    settings.truncation = truncation
    settings.weight_decay = 0.0  # only the loss may move the weights
    trainer = Trainer(settings, run_dir=tmp_path)
    episode = make_experiences(num_groups=1, group_size=1)[0]
    episode.advantages = torch.ones(episode.response_length)
    episode.episode_truncated = True
    before = {k: v.clone() for k, v in trainer.actor.state_dict().items()}
    trainer.train_step([episode])
    changed = any(not torch.equal(v, before[k]) for k, v in trainer.actor.state_dict().items())
    assert changed == trains
