"""The LoRA quickstart, shortened: a full-weight SFT warm-up, then GRPO on a LoRA adapter raises
held-out accuracy while every sync sends the adapter alone."""

from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from trivium.cli.main import main
from trivium.data.builder import build_task_data
from trivium.models.tiny import build_tiny_model

from .conftest import read_metrics

QUICKSTART_LORA = Path(__file__).resolve().parents[2] / "examples" / "quickstart_lora.yaml"
GRPO_STEPS = 40


@pytest.mark.slow
def test_lora_grpo_stage_raises_accuracy_and_syncs_only_the_adapter(tmp_path, monkeypatch):
    model_dir = build_tiny_model(tmp_path / "model", preset="tiny", seed=0)
    monkeypatch.setenv("TRIVIUM_MODEL_PATH", str(model_dir))
    monkeypatch.setenv(
        "TRIVIUM_DATA_PATH", str(build_task_data("arithmetic", tmp_path / "data", num_train=2000, num_test=200))
    )
    monkeypatch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    overrides = [f"buffer.total_steps={GRPO_STEPS}", f"explorer.eval_interval={GRPO_STEPS}"]
    assert main(["run", "--config", str(QUICKSTART_LORA), *overrides]) == 0

    run_dir = tmp_path / "runs" / "quickstart" / "arithmetic_lora" / "grpo"
    records = read_metrics(run_dir)
    evals = [r["eval/arithmetic_test/accuracy"] for r in records if "eval/arithmetic_test/accuracy" in r]
    assert len(evals) == 2
    assert evals[-1] > evals[0] + 0.05 or evals[-1] >= 0.95, f"held-out accuracy did not rise: {evals}"

    model_bytes = sum(path.stat().st_size for path in model_dir.glob("*.safetensors"))
    sync_bytes = [r["sync/bytes"] for r in records if "sync/bytes" in r]
    assert len(sync_bytes) >= GRPO_STEPS - 1
    assert max(sync_bytes) < 0.1 * model_bytes, f"a sync moved {max(sync_bytes)} bytes of a {model_bytes}-byte model"
    checks = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    assert checks and max(checks) < 1e-3, "the engine serves what the trainer holds"

    actor = run_dir / f"global_step_{GRPO_STEPS}" / "actor"
    assert (actor / "adapter_config.json").is_file() and (actor / "adapter_model.safetensors").is_file()
    AutoModelForCausalLM.from_pretrained(actor / "huggingface")  # the merged export loads on its own
