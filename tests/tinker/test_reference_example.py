"""The reference system's own Tinker example runs against ``trivium serve-tinker`` as it is, but
for the overrides that fit it to this machine: a local tiny model and taskset, and a short run."""

import json
import os
from pathlib import Path

import pytest

tinker = pytest.importorskip("tinker")

from trivium.cli.main import main
from trivium.data.builder import build_task_data

from .conftest import BASE_MODEL, SDK_KEY

EXAMPLE = (
    Path(
        os.environ.get(
            "TRIVIUM_REFERENCE_EXAMPLES",
            Path(__file__).resolve().parents[3] / "shared" / "reference-configs" / "examples",
        )
    )
    / "tinker"
    / "tinker.yaml"
)


@pytest.mark.slow
@pytest.mark.skipif(
    not EXAMPLE.is_file(), reason=f"the reference examples are not at {EXAMPLE.parent.parent}"
)
def test_the_reference_tinker_example_trains_on_trivium_serve_tinker(
    tinker_url, tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("TINKER_BASE_URL", tinker_url)
    monkeypatch.setenv("TINKER_API_KEY", SDK_KEY)
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    data = build_task_data("arithmetic", tmp_path / "data", seed=0, num_train=32, num_test=4)
    overrides = [
        f"model.model_path={tiny_model_dir}",
        f"model.tinker.base_model={BASE_MODEL}",
        "model.max_prompt_tokens=32",
        "model.max_response_tokens=8",
        f"buffer.explorer_input.taskset.path={data}",
        "buffer.explorer_input.taskset.subset_name=null",
        "buffer.batch_size=4",
        "buffer.total_steps=2",
        "algorithm.repeat_times=4",
        "explorer.rollout_model.engine_num=1",
        "explorer.runner_per_model=2",
    ]
    assert main(["run", "--config", str(EXAMPLE), *overrides]) == 0

    run_dir = tmp_path / "runs" / "Trinity-RFT-gsm8k" / "tinker-Qwen3-4B"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r.get("role") == "trainer" and "actor/pg_loss" in r]
    explored = [r for r in records if "rollout/reward_mean" in r]
    assert len(trained) == 2 and len(explored) == 2
    # The second step sampled from the weights the service saved after the first.
    assert [r["explorer/model_version"] for r in explored] == [0, 1]
