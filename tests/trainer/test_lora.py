"""LoRA training: only the adapter trains, the reference is the base with the adapter off,
and checkpoints save and restore the adapter in peft's format."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from trivium.core.batch import ExperienceBatch
from trivium.errors import UserError
from trivium.trainer import checkpoint as ckpt
from trivium.trainer.forward import whole_batch_logprobs
from trivium.trainer.lora import adapter_parameters
from trivium.trainer.settings import LoRASettings, LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import make_experiences

KL_LOSS = {"policy_loss_fn": "ppo", "kl_loss_fn": "low_var_kl", "kl_loss_coef": 0.1}


def lora_trainer(model_dir, run_dir, *, lora=None, **loss) -> Trainer:
    settings = TrainerSettings(
        model_path=model_dir, lr=1e-2, micro_batch_size=4, loss=LossSettings(**(loss or KL_LOSS)),
        lora=lora or LoRASettings(rank=4, alpha=8),
    )
    torch.manual_seed(0)
    return Trainer(settings, run_dir=run_dir)


def move_adapter(trainer: Trainer, seed: int = 0) -> None:
    """Give lora_B (zero at start) values, as training would: the adapter now changes the model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in trainer.actor.named_parameters():
            if ".lora_B." in name:
                parameter.copy_(0.2 * torch.randn(parameter.shape, generator=generator))


def test_optimizer_holds_only_the_adapter_and_base_weights_stay(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    adapter = {id(p) for p in adapter_parameters(trainer.actor)}
    assert optimized == adapter and len(adapter) == 2 * 7 * 4  # A and B of 7 linear layers in 4 blocks
    assert not any(p.requires_grad for n, p in trainer.actor.named_parameters() if ".lora_" not in n)

    base_before = {n: p.clone() for n, p in trainer.actor.named_parameters() if ".lora_" not in n}
    adapter_before = {n: p.clone() for n, p in trainer.actor.named_parameters() if ".lora_" in n}
    trainer.train_step(make_experiences())
    assert all(torch.equal(p, base_before[n]) for n, p in trainer.actor.named_parameters() if ".lora_" not in n)
    moved = [n for n, p in trainer.actor.named_parameters() if ".lora_" in n and not torch.equal(p, adapter_before[n])]
    assert moved, "a step must move the adapter"


def test_reference_is_the_base_model_without_a_second_copy(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    assert trainer.reference is None
    move_adapter(trainer)
    batch = ExperienceBatch.from_experiences(make_experiences())
    plan = trainer.plan(batch)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    base_logprobs = whole_batch_logprobs(base, batch, plan, False)
    reference = trainer.compute_reference(batch, plan)
    actor = whole_batch_logprobs(trainer.actor, batch, plan, False)
    mask = batch.response_mask.bool()
    assert (actor - base_logprobs)[mask].abs().max() > 0.05, "the moved adapter must change the policy"
    assert torch.allclose(reference[mask], base_logprobs[mask], atol=1e-5)
    # The adapter is switched back on after the reference pass.
    assert torch.allclose(whole_batch_logprobs(trainer.actor, batch, plan, False)[mask], actor[mask], atol=1e-6)


def test_kl_to_reference_is_zero_at_the_start_and_grows(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    first = trainer.train_step(make_experiences())
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-7)  # lora_B starts at zero
    trainer.train_step(make_experiences(seed=1))
    assert trainer.train_step(make_experiences(seed=2))["actor/kl_loss"] > 0


def test_checkpoint_saves_the_adapter_and_resume_continues_identically(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path / "run")
    for seed in range(2):
        trainer.train_step(make_experiences(seed=seed))
    path = trainer.save_checkpoint(export_hf=False)
    actor_dir = path / "actor"
    assert (actor_dir / "adapter_model.safetensors").is_file()
    config = json.loads((actor_dir / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 8, "LORA")
    assert not (actor_dir / "model.safetensors").exists(), "no copy of the base weights"
    assert ckpt.checkpoint_problem(tmp_path / "run", 2) is None

    resumed = lora_trainer(tiny_model_dir, tmp_path / "run")
    resumed.load_checkpoint(2)
    assert resumed.global_step == 2
    for (name, mine), (_, theirs) in zip(trainer.actor.named_parameters(), resumed.actor.named_parameters()):
        assert torch.equal(mine, theirs), name
    # The optimizer's moments came back too: the next step is the same on both.
    trainer.train_step(make_experiences(seed=5))
    resumed.train_step(make_experiences(seed=5))
    for (name, mine), (_, theirs) in zip(adapter_named(trainer), adapter_named(resumed)):
        assert torch.allclose(mine, theirs, atol=1e-6), name


def adapter_named(trainer: Trainer):
    return [(n, p) for n, p in trainer.actor.named_parameters() if ".lora_" in n]


def test_resuming_across_lora_and_full_training_is_refused(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    trainer.train_step(make_experiences())
    trainer.save_checkpoint(export_hf=False)
    full = Trainer(TrainerSettings(model_path=tiny_model_dir), run_dir=tmp_path)
    with pytest.raises(UserError, match="holds a LoRA adapter.*set model.lora_configs"):
        full.load_checkpoint(1)


def test_resuming_with_other_lora_settings_names_the_setting_and_both_values(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path)
    trainer.train_step(make_experiences())
    trainer.save_checkpoint(export_hf=False)
    for lora, key, mine, theirs in ((LoRASettings(rank=8, alpha=8), "lora_rank", 8, 4),
                                     (LoRASettings(rank=4, alpha=16), "lora_alpha", 16, 8)):
        resumed = lora_trainer(tiny_model_dir, tmp_path, lora=lora)
        with pytest.raises(UserError) as refused:
            resumed.load_checkpoint(1)
        message = str(refused.value)
        assert f"{key} is {mine}" in message and f"trained with {key}: {theirs}" in message
        assert "global_step_1" in message and "size mismatch" not in message


def test_training_continues_from_a_saved_adapter(tiny_model_dir, tmp_path):
    trainer = lora_trainer(tiny_model_dir, tmp_path / "first")
    move_adapter(trainer)
    trainer.actor.save_pretrained(tmp_path / "adapter")
    again = lora_trainer(tiny_model_dir, tmp_path / "second", lora=LoRASettings(rank=4, alpha=8, init_path=str(tmp_path / "adapter")))
    for (name, mine), (_, theirs) in zip(adapter_named(trainer), adapter_named(again)):
        assert torch.equal(mine, theirs), name
    assert all(p.requires_grad for _, p in adapter_named(again))
    with pytest.raises(UserError, match="lora_rank is 8 but the adapter .* has 4"):
        lora_trainer(tiny_model_dir, tmp_path / "third", lora=LoRASettings(rank=8, alpha=8, init_path=str(tmp_path / "adapter")))


def test_target_modules_and_adapter_dtype(tiny_model_dir, tmp_path):
    trainer = lora_trainer(
        tiny_model_dir, tmp_path, lora=LoRASettings(rank=2, alpha=2, target_modules=("q_proj", "v_proj"), dtype="bfloat16")
    )
    names = [n for n, _ in adapter_named(trainer)]
    assert len(names) == 2 * 2 * 4 and all(("q_proj" in n or "v_proj" in n) for n in names)
    assert {p.dtype for _, p in adapter_named(trainer)} == {torch.bfloat16}
    with pytest.raises(UserError, match=r"model.lora_configs\[0\].target_modules"):
        lora_trainer(tiny_model_dir, tmp_path, lora=LoRASettings(rank=2, alpha=2, target_modules=("no_such_layer",)))
