import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from trivium.core.experience import Experience


def make_experiences(num_groups=2, group_size=4, prompt_len=5, seed=0, vocab=50):
    """Random token sequences of varied lengths with rewards and group ids."""
    generator = torch.Generator().manual_seed(seed)
    experiences = []
    for g in range(num_groups):
        for i in range(group_size):
            p = prompt_len + (i % 2)
            r = 3 + (i + g) % 4
            tokens = torch.randint(5, vocab, (p + r,), generator=generator)
            experiences.append(
                Experience(
                    tokens=tokens,
                    prompt_length=p,
                    logprobs=torch.zeros(r),
                    reward=float((i + g) % 2),
                    group_id=f"g{g}",
                    advantages=torch.full((r,), 1.0 if (i + g) % 2 else -1.0),
                )
            )
    return experiences


def qwen2_model() -> torch.nn.Module:
    """A small random Qwen2: a second decoder family beside the tiny Llama."""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    return Qwen2ForCausalLM(config)


@pytest.fixture(params=["llama", "qwen2"])
def model(request, tiny_model_dir):
    """A fresh model of each family the trainer's exact forwards are checked on."""
    if request.param == "llama":
        return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return qwen2_model()


# One process and N ranks compute the same float32 update up to summation order.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def assert_close_metrics(one: dict, two: dict, keys) -> None:
    for key in keys:
        assert two[key] == pytest.approx(one[key], rel=TOLERANCE["rtol"], abs=TOLERANCE["atol"]), key


def assert_close_weights(one: dict, two: dict) -> None:
    assert one.keys() == two.keys()
    for name, expected in one.items():
        torch.testing.assert_close(two[name], expected.cpu(), **TOLERANCE, msg=name)
