"""An RL loop written the way Tinker's cookbook writes one raises the reward, through the official SDK.

Each step: save the weights for a sampler, sample a group of answers per prompt, score them,
center the rewards within each group as advantages, train with the importance_sampling loss,
take an optimizer step. The task: answer with one token from the first quarter of the
vocabulary; the untrained tiny model does so about a quarter of the time.
"""

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types

PROMPTS = [[20, 21, 14, 22], [52, 88, 72, 293], [224, 90, 75, 262], [34, 23, 25, 32]]
GROUP_SIZE = 8
STEPS = 12


def make_reward(vocab_size: int):
    def reward(tokens: list[int]) -> float:
        return 1.0 if tokens[0] < vocab_size // 4 else 0.0

    return reward


def rl_datum(prompt: list[int], sequence, advantage: float) -> types.Datum:
    tokens = prompt + sequence.tokens
    prompt_positions = len(prompt) - 1  # input positions whose target is still prompt
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * prompt_positions + list(sequence.logprobs),
            "advantages": [0.0] * prompt_positions + [advantage] * len(sequence.tokens),
        },
    )


@pytest.mark.slow
def test_importance_sampling_rl_raises_the_mean_reward(service_client):
    training_client = service_client.create_lora_training_client(base_model="tiny", rank=8, seed=0).result()
    reward = make_reward(len(training_client.get_tokenizer()))
    params = types.SamplingParams(max_tokens=1, temperature=1.0, stop=[])
    mean_rewards = []
    for _step in range(STEPS):
        sampler = training_client.save_weights_and_get_sampling_client().result()
        futures = [sampler.sample(types.ModelInput.from_ints(p), GROUP_SIZE, params) for p in PROMPTS]
        datums, step_rewards = [], []
        for prompt, future in zip(PROMPTS, futures):
            sequences = future.result().sequences
            rewards = [reward(sequence.tokens) for sequence in sequences]
            step_rewards += rewards
            mean = sum(rewards) / len(rewards)
            datums += [rl_datum(prompt, s, r - mean) for s, r in zip(sequences, rewards) if r != mean]
        mean_rewards.append(sum(step_rewards) / len(step_rewards))
        if datums:
            training_client.forward_backward(datums, "importance_sampling")
            training_client.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    first, last = sum(mean_rewards[:3]) / 3, sum(mean_rewards[-3:]) / 3
    assert last > first + 0.3, mean_rewards
