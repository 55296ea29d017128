"""The vllm engine on vLLM's real API: sampling, logprobs, scoring, weight sync and versions.

One engine serves the whole module; the weight-update test restores the original weights.
"""

import pytest
import torch

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.models.engine import SamplingParams, create_engine
from trivium.models.engine.vllm import FORCED_TOKENS_KEY, FORCED_TOKENS_PROCESSOR, VLLMEngine
from trivium.models.engine.vllm_weights import weight_buckets
from trivium.trainer.forward import trainer_logprobs
from trivium.trainer.trainer_setup import load_causal_lm

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)
from trivium.models.engine import vllm_forced_tokens  # imports vLLM

PROMPTS = [[11, 25, 37, 42, 56, 61, 70], [90, 12, 33], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]
MAX_MODEL_LEN = 48


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = create_engine(
        "vllm",
        model_path=tiny_model_dir,
        dtype="float32",
        seed=0,
        max_model_len=MAX_MODEL_LEN,
        enforce_eager=True,
        engine_options={"enable_prefix_caching": True, "max_num_seqs": 64},
        bucket_bytes=100_000,  # several buckets even for the tiny model, some splitting a layer
    )
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def trainer_model(tiny_model_dir):
    return load_causal_lm(tiny_model_dir, trainable=False)


def trainer_scores(model, sequences, prompt_lengths):
    probes = [Experience(tokens=torch.tensor(s), prompt_length=p) for s, p in zip(sequences, prompt_lengths)]
    return trainer_logprobs(model, probes)


def test_engine_options_reach_vllm(engine):
    config = engine.llm.llm_engine.vllm_config
    assert config.cache_config.enable_prefix_caching is True
    assert config.scheduler_config.max_num_seqs == 64
    assert config.model_config.logprobs_mode == "raw_logprobs"
    assert config.model_config.enforce_eager is True
    assert config.model_config.logits_processors == [FORCED_TOKENS_PROCESSOR]
    assert vllm_forced_tokens.FORCED_TOKENS_KEY == FORCED_TOKENS_KEY  # one key on both sides


def test_generate_returns_the_sampled_ids_their_logprobs_and_text(engine):
    outputs = engine.generate(PROMPTS, SamplingParams(max_tokens=8, min_tokens=8, seed=1))
    assert [len(o) for o in outputs] == [1, 1, 1]
    for prompt, (out,) in zip(PROMPTS, outputs):
        assert out.prompt_ids == prompt
        assert len(out.token_ids) == len(out.logprobs) == 8
        assert out.finish_reason == "length" and out.model_version == 0
        assert all(lp < 0 for lp in out.logprobs)
        assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_n_samples_per_prompt_differ_and_a_seed_reproduces_them(engine):
    params = SamplingParams(n=4, max_tokens=10, min_tokens=10, seed=7)
    first = engine.generate(PROMPTS[:2], params)
    again = engine.generate(PROMPTS[:2], params)
    assert [len(o) for o in first] == [4, 4]
    for samples, repeat in zip(first, again):
        ids = [tuple(s.token_ids) for s in samples]
        assert len(set(ids)) == 4  # 10 tokens from a 384-token vocabulary never repeat by chance
        assert ids == [tuple(s.token_ids) for s in repeat]


def test_sampled_logprobs_are_the_trainers_raw_logprobs(engine, trainer_model):
    # Temperature, top-k and top-p shape the sampling, never the reported logprobs.
    params = SamplingParams(n=2, temperature=0.7, top_k=50, top_p=0.9, max_tokens=12, seed=3)
    outputs = [s for samples in engine.generate(PROMPTS, params) for s in samples]
    sequences = [o.prompt_ids + o.token_ids for o in outputs]
    reference = trainer_scores(trainer_model, sequences, [len(o.prompt_ids) for o in outputs])
    for out, expected in zip(outputs, reference):
        gap = (torch.tensor(out.logprobs) - expected).abs().max().item()
        assert gap <= 1e-3, gap


def test_a_replay_samples_the_given_tokens_and_reports_what_sampling_reported(engine, trainer_model):
    # The self-check's path: vLLM's own samples forced back through generate.
    params = SamplingParams(n=2, temperature=0.8, top_k=40, max_tokens=10, seed=5)
    samples = [s for group in engine.generate(PROMPTS, params) for s in group]
    sequences = [s.prompt_ids + s.token_ids for s in samples]
    replayed = engine.replay_logprobs(sequences, [len(s.prompt_ids) for s in samples])
    for sample, logprobs in zip(samples, replayed):
        assert logprobs.shape == (len(sample.token_ids),)
        assert (logprobs - torch.tensor(sample.logprobs)).abs().max().item() <= 1e-5
    # A forced end-of-sequence id does not end the replay; an empty response gives no logprobs.
    eos = engine.default_stop_ids[0]
    sequences = [PROMPTS[0] + [40, eos, 41, 42], PROMPTS[1] + [7], PROMPTS[2]]
    prompt_lengths = [len(p) for p in PROMPTS]
    replayed = engine.replay_logprobs(sequences, prompt_lengths)
    assert [r.shape[0] for r in replayed] == [4, 1, 0]
    reference = trainer_scores(trainer_model, sequences[:2], prompt_lengths[:2])
    for got, expected in zip(replayed, reference):
        assert (got - expected).abs().max().item() <= 1e-3


def test_greedy_matches_the_hf_engine_token_for_token(engine, tiny_model_dir):
    hf = create_engine("hf", model_path=tiny_model_dir, dtype="float32", seed=0)
    params = SamplingParams(temperature=0, max_tokens=12, min_tokens=12)
    for ours, theirs in zip(engine.generate(PROMPTS, params), hf.generate(PROMPTS, params)):
        assert ours[0].token_ids == theirs[0].token_ids


def test_a_stop_token_ends_the_sequence_and_stays_in_token_ids(engine):
    # Seeded sampling is reproducible, so the run with a stop id retraces the free run up to it.
    sampled = SamplingParams(max_tokens=12, min_tokens=12, seed=11)
    (free,) = engine.generate([PROMPTS[0]], sampled)[0]
    # min_tokens=1 keeps a stop id from being the first token, as in the hf engine.
    stop = next(t for t in free.token_ids[1:] if t != free.token_ids[0])
    first_hit = free.token_ids.index(stop)
    with_stop = SamplingParams(max_tokens=12, seed=11, stop_token_ids=(stop,))
    (out,) = engine.generate([PROMPTS[0]], with_stop)[0]
    assert out.token_ids == free.token_ids[: first_hit + 1]
    assert out.finish_reason == "stop" and len(out.logprobs) == first_hit + 1


def test_max_tokens_is_cut_to_the_room_left_in_max_model_len(engine):
    prompt = list(range(5, 5 + MAX_MODEL_LEN - 3))
    (out,) = engine.generate([prompt], SamplingParams(max_tokens=10, min_tokens=10))[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"
    with pytest.raises(UserError, match="no room to generate"):
        engine.generate([list(range(5, 5 + MAX_MODEL_LEN))], SamplingParams(max_tokens=2))


def test_compute_logprobs_matches_the_trainer_up_to_max_model_len(engine, trainer_model):
    sequences = [PROMPTS[0] + [100, 101, 102, 103], list(range(20, 20 + MAX_MODEL_LEN))]
    prompt_lengths = [len(PROMPTS[0]), 10]
    scores = engine.compute_logprobs(sequences, prompt_lengths)
    reference = trainer_scores(trainer_model, sequences, prompt_lengths)
    for seq, p, got, expected in zip(sequences, prompt_lengths, scores, reference):
        assert got.shape == (len(seq) - p,)
        assert (got - expected).abs().max().item() <= 1e-3


def test_weight_update_changes_outputs_and_the_worker_confirms_the_version(engine, trainer_model):
    original = {name: t.clone() for name, t in trainer_model.state_dict().items()}
    greedy = SamplingParams(temperature=0, max_tokens=12, min_tokens=12)
    before = engine.generate(PROMPTS, greedy)
    generator = torch.Generator().manual_seed(0)
    changed = {name: t + 0.05 * torch.randn(t.shape, generator=generator) for name, t in original.items()}
    try:
        assert engine.update_weights(changed, 5) == 5
        assert engine.version() == 5
        assert engine.llm.collective_rpc("trivium_weight_version_served") == [5]
        after = engine.generate(PROMPTS, greedy)
        assert all(out[0].model_version == 5 for out in after)
        assert [o[0].token_ids for o in after] != [o[0].token_ids for o in before]
        # The engine now serves exactly the new weights: the trainer's scores with them agree,
        # and so does the self-check's replay of the old outputs.
        trainer_model.load_state_dict(changed)
        sequences = [o[0].prompt_ids + o[0].token_ids for o in after]
        reference = trainer_scores(trainer_model, sequences, [len(p) for p in PROMPTS])
        for (out,), expected in zip(after, reference):
            assert (torch.tensor(out.logprobs) - expected).abs().max().item() <= 1e-3
        old_sequences = [o[0].prompt_ids + o[0].token_ids for o in before]
        old_reference = trainer_scores(trainer_model, old_sequences, [len(p) for p in PROMPTS])
        replayed = engine.replay_logprobs(old_sequences, [len(p) for p in PROMPTS])
        for got, expected in zip(replayed, old_reference):
            assert (got - expected).abs().max().item() <= 1e-3
    finally:
        trainer_model.load_state_dict(original)
        assert engine.update_weights(original, 0) == 0
    assert [o[0].token_ids for o in engine.generate(PROMPTS, greedy)] == [o[0].token_ids for o in before]


def test_a_partial_update_leaves_the_other_weights_as_they_were(engine, trainer_model):
    state = trainer_model.state_dict()
    name = "model.layers.0.mlp.down_proj.weight"
    greedy = SamplingParams(temperature=0, max_tokens=8, min_tokens=8)
    before = engine.generate(PROMPTS, greedy)
    try:
        engine.update_weights({name: state[name] * 3.0}, 6)
        trainer_model.get_parameter(name).mul_(3.0)
        after = engine.generate(PROMPTS, greedy)
        sequences = [o[0].prompt_ids + o[0].token_ids for o in after]
        reference = trainer_scores(trainer_model, sequences, [len(p) for p in PROMPTS])
        for (out,), expected in zip(after, reference):
            assert (torch.tensor(out.logprobs) - expected).abs().max().item() <= 1e-3
    finally:
        trainer_model.get_parameter(name).div_(3.0)
        engine.update_weights({name: trainer_model.state_dict()[name]}, 0)
    assert [o[0].token_ids for o in engine.generate(PROMPTS, greedy)] == [o[0].token_ids for o in before]


def test_weight_buckets_respect_the_size_and_keep_every_tensor():
    state = {f"w{i}": torch.full((10, 10), float(i)) for i in range(5)}  # 400 bytes each
    state["tied"] = state["w0"]  # shares storage, as tied embeddings do
    buckets = list(weight_buckets(state, bucket_bytes=900))
    assert [list(b) for b in buckets] == [["w0", "w1"], ["w2", "w3"], ["w4", "tied"]]
    assert buckets[2]["tied"].data_ptr() != state["w0"].data_ptr()
    assert all(torch.equal(b[name], state[name]) for b in buckets for name in b)


def test_options_trivium_sets_itself_or_vllm_lacks_are_refused_by_name(tiny_model_dir):
    with pytest.raises(UserError, match="'logprobs_mode' is set by trivium"):
        VLLMEngine(tiny_model_dir, engine_options={"logprobs_mode": "processed_logprobs"})
    with pytest.raises(UserError, match="explorer.rollout_model.enforce_eager"):
        VLLMEngine(tiny_model_dir, engine_options={"enforce_eager": True})
    with pytest.raises(UserError, match="did you mean enable_prefix_caching"):
        VLLMEngine(tiny_model_dir, enable_prefix_cache=True)


def test_sleep_mode_on_cpu_is_a_clear_error(tiny_model_dir):
    with pytest.raises(UserError, match="no sleep mode on this device"):
        VLLMEngine(tiny_model_dir, enable_sleep_mode=True)


def test_rope_overrides_reach_vllm_as_they_reach_the_trainer(tiny_model_dir, trainer_model):
    from trivium.models.rope import rope_config_overrides

    overrides = rope_config_overrides(tiny_model_dir, rope_scaling=None, rope_theta=2.0)
    overridden = load_causal_lm(tiny_model_dir, trainable=False, config_overrides=overrides)
    engine = create_engine(
        "vllm", model_path=tiny_model_dir, dtype="float32", seed=0, max_model_len=MAX_MODEL_LEN, enforce_eager=True,
        rope_theta=2.0,
    )
    try:
        sequences, prompt_lengths = [PROMPTS[2] + [100, 101, 102, 103, 104, 105]], [len(PROMPTS[2])]
        (got,) = engine.compute_logprobs(sequences, prompt_lengths)
    finally:
        engine.close()
    (expected,) = trainer_scores(overridden, sequences, prompt_lengths)
    (plain,) = trainer_scores(trainer_model, sequences, prompt_lengths)
    assert (expected - plain).abs().max().item() > 5e-3  # the override changes the model
    assert (got - expected).abs().max().item() <= 1e-3
