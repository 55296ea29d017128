"""save_state / load_state through the official SDK restore the exact weights."""

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types

DATA = [
    types.Datum(
        model_input=types.ModelInput.from_ints([20, 21, 14, 22, 23]),
        loss_fn_inputs={"target_tokens": [21, 14, 22, 23, 32], "weights": [1.0] * 5},
    )
]


def loss(client) -> float:
    return client.forward(DATA, "cross_entropy").result().metrics["loss:sum"]


def train_step(client) -> None:
    client.forward_backward(DATA, "cross_entropy")
    client.optim_step(types.AdamParams(learning_rate=2e-2)).result()


def test_save_then_load_state_restores_the_loss(training_client, service_client):
    train_step(training_client)
    saved = training_client.save_state("after-one-step").result().path
    assert saved.startswith("tinker://") and saved.endswith("/weights/after-one-step")
    at_save = loss(training_client)

    train_step(training_client)
    train_step(training_client)
    assert loss(training_client) < at_save - 0.1

    training_client.load_state(saved).result()  # weights only
    assert loss(training_client) == pytest.approx(at_save, abs=1e-6)
    training_client.load_state_with_optimizer(saved).result()

    fresh = service_client.create_training_client_from_state_with_optimizer(saved).result()
    assert loss(fresh) == pytest.approx(at_save, abs=1e-6)
    # Both have the optimizer state of the save: the same step gives the same loss.
    train_step(training_client)
    train_step(fresh)
    assert loss(fresh) == pytest.approx(loss(training_client), abs=1e-5)


def test_saving_over_a_checkpoint_needs_overwrite(training_client):
    training_client.save_state("once").result()
    with pytest.raises(Exception, match="exists"):
        training_client.save_state("once").result()
