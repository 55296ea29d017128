"""Exporting RUN/global_step_N/actor as a Hugging Face model, and loading it outside trivium."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

from trivium.cli.main import main
from trivium.errors import UserError
from trivium.interop.checkpoint_export import export_checkpoint
from trivium.models.tokenizer_builder import build_tokenizer
from trivium.trainer.checkpoint import save_checkpoint

DOCS = Path(__file__).resolve().parents[2] / "docs" / "interop.md"
TEXT = "What is 12 + 7? Answer: 19"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """A tiny random Qwen2 model with a tokenizer, standing in for the run's base model."""
    directory = tmp_path_factory.mktemp("base")
    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def trained_actor(base_model: Path) -> torch.nn.Module:
    """The base model with one weight changed, as a training step would."""
    model = AutoModelForCausalLM.from_pretrained(base_model)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.add_(0.5)
        model.model.embed_tokens.weight[5].mul_(2.0)  # tied to lm_head
    return model.eval()


def write_run(tmp_path: Path, base_model: Path, model: torch.nn.Module, **save_options) -> Path:
    run_dir = tmp_path / "checkpoints" / "proj" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "config.resolved.yaml").write_text(yaml.safe_dump({"model": {"model_path": str(base_model)}}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return save_checkpoint(
        run_dir, 3, actor=model, optimizer=optimizer, scheduler=scheduler, trainer_state={}, **save_options
    )


def logits(model: torch.nn.Module, base_model: Path) -> torch.Tensor:
    ids = AutoTokenizer.from_pretrained(base_model)(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits


def test_cli_export_gives_identical_logits_and_the_tokenizer(tmp_path, base_model, capsys):
    source = trained_actor(base_model)
    step = write_run(tmp_path, base_model, source)
    assert main(["convert", "checkpoint", "--path", str(step)]) == 0
    out = step / "actor" / "huggingface"
    assert str(out) in capsys.readouterr().out
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    assert torch.equal(logits(exported, base_model), logits(source, base_model))
    # The change is really in the export (not the base model's weights).
    base = AutoModelForCausalLM.from_pretrained(base_model).eval()
    assert not torch.equal(logits(base, base_model), logits(exported, base_model))
    assert (
        AutoTokenizer.from_pretrained(out)(TEXT).input_ids
        == AutoTokenizer.from_pretrained(base_model)(TEXT).input_ids
    )


def test_weights_written_without_tied_copies_load_strictly(tmp_path, base_model):
    """A state dict saved with safetensors directly (lm_head tied, so stored once)."""
    source = trained_actor(base_model)
    step = write_run(tmp_path, base_model, source)
    state = {k: v.contiguous() for k, v in source.state_dict().items() if k != "lm_head.weight"}
    save_file(state, step / "actor" / "model.safetensors")
    out = export_checkpoint(step, tmp_path / "exported")
    assert torch.equal(
        logits(AutoModelForCausalLM.from_pretrained(out), base_model), logits(source, base_model)
    )


def test_existing_export_supplies_the_tokenizer(tmp_path, base_model):
    source = trained_actor(base_model)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    step = write_run(tmp_path, base_model, source, tokenizer=tokenizer, export_hf=True)
    (step.parent / "config.resolved.yaml").unlink()  # the base model is not needed then
    out = export_checkpoint(step, tmp_path / "elsewhere")
    assert (out / "tokenizer.json").is_file()


def test_missing_step_lists_the_checkpoints_there(tmp_path, base_model):
    step = write_run(tmp_path, base_model, trained_actor(base_model))
    with pytest.raises(UserError, match="not found.*global_step_3"):
        export_checkpoint(step.parent / "global_step_9")


def test_incomplete_or_mismatched_checkpoints_are_clear_errors(tmp_path, base_model):
    step = write_run(tmp_path, base_model, trained_actor(base_model))
    weights = step / "actor" / "model.safetensors"
    saved = weights.read_bytes()
    weights.unlink()
    with pytest.raises(UserError, match="missing model.safetensors"):
        export_checkpoint(step)
    weights.write_bytes(saved)
    state = {"model.extra.weight": torch.zeros(2)}
    save_file(state, weights)
    with pytest.raises(UserError, match="do not fit its config.json"):
        export_checkpoint(step, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written on failure
    (step.parent / "config.resolved.yaml").unlink()
    with pytest.raises(UserError, match="--tokenizer"):
        export_checkpoint(step)


def test_docs_snippet_runs(tmp_path, base_model, monkeypatch, capsys):
    document = DOCS.read_text()
    snippet = re.search(r"<!-- checkpoint-snippet -->\n```python\n(.*?)```", document, re.DOTALL).group(1)
    step = write_run(tmp_path, base_model, trained_actor(base_model))
    assert step == tmp_path / "checkpoints" / "proj" / "run" / "global_step_3"
    shutil.move(str(tmp_path / "checkpoints" / "proj"), str(tmp_path / "checkpoints" / "my_project"))
    (tmp_path / "checkpoints" / "my_project" / "run").rename(
        tmp_path / "checkpoints" / "my_project" / "my_run"
    )
    (tmp_path / "checkpoints" / "my_project" / "my_run" / "global_step_3").rename(
        tmp_path / "checkpoints" / "my_project" / "my_run" / "global_step_100"
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(snippet, str(DOCS), "exec"), namespace)  # noqa: S102 - runs the documented snippet
    assert capsys.readouterr().out.startswith("What is 2 + 3?")
    assert torch.equal(
        logits(namespace["model"], base_model), logits(namespace["same_model"].eval(), base_model)
    )
