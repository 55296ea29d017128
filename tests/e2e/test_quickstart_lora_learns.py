"""The LoRA quickstart, shortened: a full-weight SFT warm-up, then GRPO on a LoRA adapter raises
held-out accuracy while every sync sends the adapter alone."""

from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from trivium.cli.main import main

from .conftest import continue_quickstart, read_metrics

GRPO_STEPS = 40


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart_sft")  # one worker runs the shared SFT stage once
@pytest.mark.timeout(1500)  # the shared SFT warm-up runs first when this test is the first to need it
def test_lora_grpo_stage_raises_accuracy_and_syncs_only_the_adapter(
    tmp_path, monkeypatch, quickstart_inputs, quickstart_sft_runs
):
    for name, value in quickstart_inputs.items():
        monkeypatch.setenv(name, value)
    model_dir = Path(quickstart_inputs["TRIVIUM_MODEL_PATH"])
    monkeypatch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    # The recipe's SFT stage (350 steps) found finished; the GRPO stage shortened.
    recipe = continue_quickstart(quickstart_sft_runs, tmp_path, "quickstart_lora.yaml", "arithmetic_lora")
    overrides = [f"buffer.total_steps={GRPO_STEPS}", f"explorer.eval_interval={GRPO_STEPS}", "continue_from_checkpoint=true"]
    assert main(["run", "--config", recipe, *overrides]) == 0

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
