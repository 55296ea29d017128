"""An hf engine computing with its owner's tensors (colocate, synced every step): one copy of
the weights in the process, and every in-place change the owner syncs is served."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from trivium.models.engine import SamplingParams, create_engine
from trivium.models.lora_delta import delta_key

from .test_engine_hf import PROMPTS, hf_greedy

GREEDY = SamplingParams(temperature=0, max_tokens=10, min_tokens=10)


def owner_and_engine(model_path):
    owner = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    engine = create_engine("hf", model_path=model_path, seed=0, dtype="float32")
    return owner, engine


def test_the_engine_holds_the_owners_tensors_and_gives_up_its_own(model_path):
    owner, engine = owner_and_engine(model_path)
    weights = {name: tensor.detach() for name, tensor in owner.state_dict().items()}
    own_bytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in engine.model.parameters()}.values())
    assert engine.holds_outside_weights
    freed = engine.hold_weights(weights)
    assert freed == own_bytes, "every parameter is held (a tied one once)"
    for name, tensor in engine.model.state_dict().items():
        assert tensor.data_ptr() == weights[name].data_ptr(), name
    # Held again (the next sync): nothing more to give up.
    assert engine.hold_weights(weights) == 0


def test_in_place_changes_of_the_owner_are_served_after_the_sync(model_path):
    owner, engine = owner_and_engine(model_path)
    weights = {name: tensor.detach() for name, tensor in owner.state_dict().items()}
    engine.hold_weights(weights)
    before = [o[0].token_ids for o in engine.generate(PROMPTS, GREEDY)]
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # the trainer's optimizer step
        for name, parameter in owner.named_parameters():
            if name.endswith("proj.weight"):
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    assert engine.update_weights(weights, version=1) == 1  # the sync: no copy, the fused weights rebuilt
    after = [o[0].token_ids for o in engine.generate(PROMPTS, GREEDY)]
    assert after != before
    # What the owner now computes, the engine serves: greedy equals model.generate of the owner.
    assert after[1] == hf_greedy(owner, PROMPTS[1], 10)
    logprobs = engine.compute_logprobs([PROMPTS[0] + after[0]], [len(PROMPTS[0])])[0]
    ids = torch.tensor([PROMPTS[0] + after[0]])
    with torch.no_grad():
        expected = owner(ids).logits[0, :-1].log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0][len(PROMPTS[0]) - 1:]
    assert torch.allclose(logprobs, expected, atol=1e-5)


def test_tensors_that_do_not_match_keep_the_engines_copy(model_path):
    _, engine = owner_and_engine(model_path)
    name, own = next(iter(engine.model.state_dict().items()))
    assert engine.hold_weights({name: own.detach().to(torch.float64)}) == 0
    assert engine.model.state_dict()[name].dtype == torch.float32


def test_a_lora_adapter_is_not_merged_into_held_weights(model_path):
    owner, engine = owner_and_engine(model_path)
    engine.hold_weights({name: tensor.detach() for name, tensor in owner.state_dict().items()})
    layer = next(name for name, _ in engine.model.named_modules() if name.endswith("q_proj"))
    weight = dict(engine.model.named_modules())[layer].weight
    adapter = {delta_key(layer, "A"): torch.zeros(2, weight.shape[1]), delta_key(layer, "B"): torch.zeros(weight.shape[0], 2)}
    with pytest.raises(RuntimeError, match="cannot be merged into weights the engine holds"):
        engine.update_weights(adapter, version=1)
