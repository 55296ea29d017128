"""A short `both` + fully_async run with decoupled PPO and sampling-mask replay (top-k 8).

The first trained batch was sampled by the weights the trainer starts from, so with replay its
decoupled importance weights pi_proximal / pi_engine are 1 for every token; the replay metrics
reach metrics.jsonl.
"""

from __future__ import annotations

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

pytestmark = pytest.mark.slow


def test_a_fully_async_decoupled_run_with_replay_weights_its_first_batch_by_one(
    assets, tmp_path, one_torch_thread, capsys
):
    config = base_config(
        assets,
        tmp_path / "runs",
        **{
            "mode": "both",
            "model.top_k": 8,
            "model.temperature": 0.9,
            "synchronizer.sync_style": "fully_async",
            "synchronizer.sync_offset": 1,
            "trainer.old_logprobs_source": "decoupled",
            "trainer.replay_sampling_mask": True,
            "trainer.sampling_mask_max_tokens": 64,
        },
    )
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    printed = capsys.readouterr()
    assert "sampling masks replayed: 8.0 tokens kept per sampled token" in printed.out + printed.err
    trained = [r for r in read_metrics(tmp_path / "runs" / "e2e" / "run") if "sampling_mask/mean_kept" in r]
    assert len(trained) == 2
    first = trained[0]
    assert first["sampling_mask/mean_kept"] == pytest.approx(8.0)  # top-k 8, no ties in float32 logits
    assert first["sampling_mask/capped_share"] == 0.0
    assert first["decoupled/weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert first["decoupled/weight_max"] == pytest.approx(1.0, abs=1e-4)
