"""LoRA served by the vllm engine: a sync sends the adapter alone, vLLM serves it as an adapter.

One engine with LoRA enabled serves the adapter of a peft model built by the trainer's own code
(``trivium.trainer.lora``); its logprobs match the peft model's, a second sync replaces the
adapter (the old one removed), and a two-step GRPO run with LoRA and the vllm engine completes
with adapter-only syncs that pass the self-check.
"""

import json
import os
import threading

import pytest
import torch
import yaml

from trivium.cli.main import main
from trivium.core.experience import Experience
from trivium.data.builder import build_task_data
from trivium.models.engine import SamplingParams, create_engine
from trivium.models.engine.vllm_lora import is_adapter_tensor
from trivium.models.lora_delta import update_bytes
from trivium.sync.collective import WeightBroadcastGroup, free_port, tensor_spec
from trivium.trainer.forward import trainer_logprobs
from trivium.trainer.lora import adapter_tensors, wrap_with_lora
from trivium.trainer.settings import LoRASettings
from trivium.trainer.trainer_setup import load_causal_lm

from .conftest import SHORT_ANSWER_REWARD, grpo_config

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)
pytest.importorskip("peft", reason="LoRA training needs peft (the lora extra)")

SEQUENCES = [[11, 25, 37, 42, 56, 61, 70, 3, 9, 14], [90, 12, 33, 44, 5, 6, 7, 8]]
PROMPT_LENGTHS = [7, 3]
RANK = 4  # below vLLM's smallest max_lora_rank above 1 (8): the engine pads it


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = create_engine(
        "vllm",
        model_path=tiny_model_dir,
        dtype="float32",
        seed=0,
        max_model_len=32,
        enforce_eager=True,
        enable_lora=True,
        lora_kwargs={"max_lora_rank": 8, "max_loras": 1},
    )
    yield engine
    engine.close()


def peft_actor(model_dir: str, seed: int) -> torch.nn.Module:
    """The trainer's LoRA actor with a non-zero adapter (a trained one's stand-in)."""
    torch.manual_seed(seed)
    actor = wrap_with_lora(load_causal_lm(model_dir, trainable=False), LoRASettings(rank=RANK, alpha=8.0))
    for name, parameter in actor.named_parameters():
        if ".lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.3)
    return actor


def scores(model):
    probes = [Experience(tokens=torch.tensor(s), prompt_length=p) for s, p in zip(SEQUENCES, PROMPT_LENGTHS)]
    return trainer_logprobs(model, probes)


def max_gap(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def test_the_engine_serves_the_trainers_adapter_sent_alone(engine, tiny_model_dir):
    base_scores = engine.compute_logprobs(SEQUENCES, PROMPT_LENGTHS)
    actor = peft_actor(tiny_model_dir, seed=1)
    update = dict(adapter_tensors(actor))
    # Only the adapter crosses: 7 adapted layers x 4 blocks x (A, B), a small fraction of the model's bytes.
    assert len(update) == 2 * 7 * 4 and all(is_adapter_tensor(name) for name in update)
    model_bytes = sum(p.numel() * p.element_size() for p in actor.get_base_model().parameters())
    assert update_bytes(update) < model_bytes / 5

    assert engine.update_weights(update, version=1) == 1
    assert engine.version() == 1 and engine.served_adapter is not None

    trainer = scores(actor)
    assert max_gap(engine.compute_logprobs(SEQUENCES, PROMPT_LENGTHS), trainer) < 1e-4
    assert max_gap(engine.replay_logprobs(SEQUENCES, PROMPT_LENGTHS), trainer) < 1e-4
    assert max_gap(base_scores, trainer) > 0.05  # the adapter changed what the engine serves
    (sample,) = engine.generate([SEQUENCES[0][:7]], SamplingParams(max_tokens=4, logprobs=True))[0]
    assert sample.model_version == 1


def test_a_second_sync_replaces_the_adapter(engine, tiny_model_dir):
    first = engine.served_adapter
    if first is None:  # this test run alone
        engine.update_weights(dict(adapter_tensors(peft_actor(tiny_model_dir, seed=1))), version=1)
        first = engine.served_adapter
    before = engine.compute_logprobs(SEQUENCES, PROMPT_LENGTHS)
    actor = peft_actor(tiny_model_dir, seed=2)
    assert engine.update_weights(dict(adapter_tensors(actor)), version=2) == 2

    second = engine.served_adapter
    assert second.lora_int_id != first.lora_int_id
    assert set(engine.llm.llm_engine.list_loras()) == {second.lora_int_id}  # the old adapter is gone
    assert not os.path.exists(first.lora_path) and not os.path.exists(
        second.lora_path
    )  # nothing left in /dev/shm
    after = engine.compute_logprobs(SEQUENCES, PROMPT_LENGTHS)
    assert max_gap(before, after) > 0.05
    assert max_gap(after, scores(actor)) < 1e-4


def test_an_adapter_broadcast_by_the_trainer_is_served(engine, tiny_model_dir):
    """The Ray placement's path: the vLLM worker joins the trainer's broadcast group, receives
    the adapter's tensors itself and writes them for vLLM to load."""
    actor = peft_actor(tiny_model_dir, seed=3)
    update = dict(adapter_tensors(actor))
    port = free_port()
    trainer_side: dict = {}

    def trainer_joins_and_sends(joined: threading.Event, send: threading.Event) -> None:
        group = WeightBroadcastGroup(address="127.0.0.1", port=port, rank=0, world_size=2, timeout=120)
        joined.set()
        send.wait(120)
        trainer_side["bytes"] = group.send(update)

    joined, send = threading.Event(), threading.Event()
    trainer = threading.Thread(target=trainer_joins_and_sends, args=(joined, send), daemon=True)
    trainer.start()
    engine.join_weight_broadcast(
        address="127.0.0.1", port=port, rank=1, world_size=2, backend="gloo", timeout=120
    )
    assert joined.wait(120)
    send.set()
    assert engine.receive_weight_broadcast(tensor_spec(update), version=3) == 3
    trainer.join(120)
    assert trainer_side["bytes"] == update_bytes(update)  # the adapter alone crossed
    assert engine.served_adapter.lora_name == "trivium-v3"
    assert max_gap(engine.compute_logprobs(SEQUENCES, PROMPT_LENGTHS), scores(actor)) < 1e-4


@pytest.mark.slow
def test_grpo_with_lora_and_the_vllm_engine_syncs_the_adapter_alone(tiny_model_dir, tmp_path):
    data = build_task_data("arithmetic", tmp_path / "data", seed=0, num_train=64, num_test=8)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = grpo_config(tiny_model_dir, str(data), str(tmp_path / "runs"), steps=2)
    config["model"]["lora_configs"] = [{"lora_rank": 8, "lora_alpha": 16}]
    config["synchronizer"]["self_check_interval"] = 1
    config["buffer"]["batch_size"] = 4
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", "--config", str(path), "--plugin-dir", str(plugins)]) == 0

    run_dir = tmp_path / "runs" / "vllm" / "grpo"
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())["explorer"]["rollout_model"]
    assert resolved["enable_lora"] is True
    assert resolved["lora_kwargs"] == {"max_lora_rank": 8, "max_loras": 1}
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    assert len([r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]) == 2
    syncs = [r for r in records if "sync/bytes" in r]
    # Each sync moved the adapter alone: 4 blocks x 7 layers x (A, B) of rank 8, float32.
    adapter_bytes = (
        4 * 8 * 4 * sum([128 + 128, 128 + 64, 128 + 64, 128 + 128, 128 + 344, 128 + 344, 344 + 128])
    )
    assert syncs and all(r["sync/bytes"] == adapter_bytes for r in syncs), syncs
    checks = [r for r in records if "sync/max_logprob_diff" in r]
    assert checks and all(c["sync/check_through_sampling"] == 1.0 for c in checks)
    assert max(c["sync/max_logprob_diff"] for c in checks) <= 1e-3, checks
