"""`trivium convert checkpoint --merge-lora`: a LoRA checkpoint becomes a plain Hugging Face model
that answers as the adapted model does."""

from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from trivium.cli.main import main
from trivium.errors import UserError
from trivium.interop.checkpoint_export import export_checkpoint
from trivium.trainer.settings import LoRASettings, LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

QUESTIONS = ["12 + 7 =", "What is 3 + 45?", "81 + 9", "hello"]


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory) -> tuple[Trainer, Path]:
    """A LoRA trainer whose adapter has moved away from zero, and its saved checkpoint."""
    run_dir = tmp_path_factory.mktemp("runs") / "proj" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "config.resolved.yaml").write_text(yaml.safe_dump({"model": {"model_path": tiny_model_dir}}))
    settings = TrainerSettings(
        model_path=tiny_model_dir, loss=LossSettings(policy_loss_fn="ppo"), lora=LoRASettings(rank=4, alpha=8)
    )
    trainer = Trainer(settings, run_dir=run_dir, tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in trainer.actor.named_parameters():
            if ".lora_B." in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    trainer.global_step = 3
    step_dir = trainer.save_checkpoint(export_hf=True)
    return trainer, step_dir


def greedy_answers(model, tokenizer) -> list[list[int]]:
    answers = []
    for question in QUESTIONS:
        ids = tokenizer(question, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12)
        answers.append(out[0, ids.shape[1] :].tolist())
    return answers


def test_merged_export_loads_and_answers_like_the_adapter(lora_run, tiny_model_dir, tmp_path):
    trainer, step_dir = lora_run
    out = tmp_path / "merged"
    assert main(["convert", "checkpoint", "--path", str(step_dir), "--out", str(out), "--merge-lora"]) == 0
    tokenizer = AutoTokenizer.from_pretrained(out)
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    adapted = trainer.actor.eval()
    expected = greedy_answers(adapted, tokenizer)
    assert expected != greedy_answers(base, tokenizer), "the adapter must change the answers"
    assert greedy_answers(merged, tokenizer) == expected
    ids = tokenizer(QUESTIONS[0], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, adapted(input_ids=ids).logits, atol=1e-4)
    # The checkpoint's own export (save_hf_checkpoint) is the same merged model.
    exported = AutoModelForCausalLM.from_pretrained(step_dir / "actor" / "huggingface").eval()
    assert greedy_answers(exported, tokenizer) == expected
    trainer.actor.train()


def test_lora_checkpoints_need_merge_lora_and_full_ones_refuse_it(lora_run, tmp_path):
    _, step_dir = lora_run
    with pytest.raises(UserError, match="holds a LoRA adapter.*--merge-lora"):
        export_checkpoint(step_dir, tmp_path / "out")
    with pytest.raises(UserError, match="pass --base-model"):
        export_checkpoint(step_dir, tmp_path / "out", merge_lora=True, base_model_path=tmp_path / "missing")
    assert not (tmp_path / "out").exists(), "nothing is written when the export cannot be made"
