"""The hf engine serves a LoRA adapter as W = W_base + B @ A, always from the base."""

import pytest
import torch

from trivium.models.engine import create_engine
from trivium.models.lora_delta import delta_key

LAYER = "model.layers.0.self_attn.q_proj"


def adapter(rank: int, out_features: int, in_features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rank, in_features, generator=generator), torch.randn(out_features, rank, generator=generator)


def test_weight_is_base_plus_b_times_a_from_the_base_every_time(llama_path):
    engine = create_engine("hf", model_path=llama_path, seed=0)
    weight = engine.model.get_submodule(LAYER).weight
    base = weight.detach().clone()
    for version, seed in ((1, 0), (2, 1)):
        a, b = adapter(2, *weight.shape, seed)
        engine.update_weights({delta_key(LAYER, "A"): a, delta_key(LAYER, "B"): b}, version)
        assert torch.allclose(weight, base + b @ a, atol=1e-6)  # not base + both adapters
    # A whole weight sent later is the new base of the next adapter.
    new_base = torch.zeros_like(base)
    engine.update_weights({f"{LAYER}.weight": new_base}, 3)
    assert torch.equal(weight, new_base)
    a, b = adapter(2, *weight.shape, 2)
    engine.update_weights({delta_key(LAYER, "A"): a, delta_key(LAYER, "B"): b}, 4)
    assert torch.allclose(weight, b @ a, atol=1e-6)


def test_a_half_waits_for_its_partner(llama_path):
    engine = create_engine("hf", model_path=llama_path, seed=0)
    weight = engine.model.get_submodule(LAYER).weight
    base = weight.detach().clone()
    a, b = adapter(2, *weight.shape, 0)
    engine.update_weights({delta_key(LAYER, "A"): a}, 1)
    assert torch.equal(weight, base)
    engine.update_weights({delta_key(LAYER, "B"): b}, 1)
    assert torch.allclose(weight, base + b @ a, atol=1e-6)


def test_adapters_that_do_not_fit_are_refused_before_anything_changes(llama_path):
    engine = create_engine("hf", model_path=llama_path, seed=0)
    weight = engine.model.get_submodule(LAYER).weight
    base = weight.detach().clone()
    a, b = adapter(2, *weight.shape, 0)
    with pytest.raises(ValueError, match="not a linear layer"):
        engine.update_weights({delta_key("model.layers.0.no_such", "A"): a, delta_key(LAYER, "A"): a}, 1)
    with pytest.raises(ValueError, match="expected \\(rank, 128\\)"):
        engine.update_weights({delta_key(LAYER, "A"): a[:, :5], delta_key(LAYER, "B"): b}, 1)
    with pytest.raises(ValueError, match="ranks 2 and 3"):
        engine.update_weights({delta_key(LAYER, "A"): a, delta_key(LAYER, "B"): torch.zeros(weight.shape[0], 3)}, 1)
    assert torch.equal(weight, base) and engine.version() == 0
