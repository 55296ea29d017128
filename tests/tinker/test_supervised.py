"""cross_entropy through the official SDK: the logprobs are the model's, and a step lowers the loss."""

import pytest
import torch
from transformers import AutoModelForCausalLM

tinker = pytest.importorskip("tinker")
from tinker import types


def supervised_datum(tokens: list[int], weights: list[float]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights},
    )


def test_cross_entropy_logprobs_match_torch_and_a_step_lowers_the_loss(training_client, tiny_model_dir):
    tokenizer = training_client.get_tokenizer()
    rows = [tokenizer.encode("12+34=46"), tokenizer.encode("7+8=15 ok")]
    weights = [[0.0] * 4 + [1.0] * (len(rows[0]) - 5), [1.0] * (len(rows[1]) - 1)]
    data = [supervised_datum(tokens, w) for tokens, w in zip(rows, weights)]

    first = training_client.forward_backward(data, "cross_entropy")
    training_client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    first = first.result()

    # The adapter starts as a no-op (B = 0), so the logprobs are the base model's.
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    expected_loss = 0.0
    for tokens, w, output in zip(rows, weights, first.loss_fn_outputs):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens[:-1]])).logits[0]
        expected = (
            torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens[1:]).unsqueeze(-1)).squeeze(-1)
        )
        returned = output["logprobs"].to_torch()
        assert returned.shape == expected.shape
        torch.testing.assert_close(returned, expected, atol=1e-5, rtol=0)
        expected_loss += float(-(torch.tensor(w) * expected).sum())
    assert first.metrics["loss:sum"] == pytest.approx(expected_loss, rel=1e-5)

    second = training_client.forward_backward(data, "cross_entropy").result()
    assert second.metrics["loss:sum"] < first.metrics["loss:sum"] - 0.5


def test_forward_computes_without_training(training_client):
    data = [supervised_datum([5, 6, 7, 8], [1.0, 1.0, 1.0])]
    before = training_client.forward(data, "cross_entropy").result().metrics["loss:sum"]
    training_client.optim_step(types.AdamParams(learning_rate=1e-2)).result()  # no gradients accumulated
    after = training_client.forward(data, "cross_entropy").result().metrics["loss:sum"]
    assert after == pytest.approx(before, abs=1e-6)
