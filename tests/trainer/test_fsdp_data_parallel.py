"""FSDP2 over 2 ranks (gloo, two processes on this CPU) against the same steps in one process.

Each test starts a real second rank; a hung collective fails by the pytest timeout and by
the trainer's own collective timeout.
"""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from trivium.trainer import checkpoint as ckpt
from trivium.trainer.settings import LossSettings, TrainerSettings
from trivium.trainer.trainer import Trainer

from .conftest import assert_close_metrics, assert_close_weights, make_experiences

# Each test starts a second process (about 40 s on two busy cores).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _ppo_with_critic(model_dir, **overrides):
    settings = TrainerSettings(
        model_path=model_dir,
        lr=1e-3,
        critic_lr=1e-3,
        use_critic=True,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=30,  # 8 rows of 8..12 tokens: 3 micro-batches, an odd count over 2 ranks
        collective_timeout=120,
        loss=LossSettings(
            policy_loss_fn="ppo",
            advantage_fn="ppo",
            advantage_fn_args={"gamma": 1.0, "lam": 0.95},
            kl_loss_fn="low_var_kl",
            kl_loss_coef=0.1,
            loss_agg_mode="token-mean",
        ),
    )
    for key, value in overrides.items():
        setattr(settings, key, value)
    return settings


def _grpo_seq_mean(model_dir, **overrides):
    settings = TrainerSettings(
        model_path=model_dir,
        lr=1e-3,
        use_dynamic_bsz=False,
        micro_batch_size=3,
        ppo_epochs=2,  # old logprobs by a separate no-grad pass, two optimizer steps
        collective_timeout=120,
        loss=LossSettings(policy_loss_fn="ppo", advantage_fn="grpo", loss_agg_mode="seq-mean-token-mean"),
    )
    for key, value in overrides.items():
        setattr(settings, key, value)
    return settings


def _without_advantages(seed):
    experiences = make_experiences(seed=seed)
    for exp in experiences:
        exp.advantages = None
    return experiences


def test_two_rank_ppo_step_with_critic_and_reference_matches_one_process(tiny_model_dir, tmp_path):
    """Resumed from a one-process checkpoint (1 -> 2 ranks), the next step of the actor, the
    reference's KL and the critic equal one process's; so do the saved critic weights."""
    single = Trainer(_ppo_with_critic(tiny_model_dir), run_dir=tmp_path)
    single.train_step(_without_advantages(seed=0))
    single.save_checkpoint(export_hf=False)
    expected = single.train_step(_without_advantages(seed=1))
    assert expected["actor/kl_loss"] > 0 and expected["critic/vf_loss"] > 0
    single.save_checkpoint(export_hf=False)

    critic_dir = ckpt.step_dir(tmp_path, 2) / "critic"
    expected_critic = {**load_file(critic_dir / "model.safetensors"), **load_file(critic_dir / "value_head.safetensors")}

    sharded = Trainer(_ppo_with_critic(tiny_model_dir, data_parallel_size=2), run_dir=tmp_path)
    try:
        sharded.load_checkpoint(1)
        assert sharded.global_step == 1
        got = sharded.train_step(_without_advantages(seed=1))
        weights = sharded.weights_for_sync()
        sharded.save_checkpoint(export_hf=False)  # over the one-process step 2, read above
    finally:
        sharded.close()
    assert_close_metrics(expected, got, ["actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss"])
    assert_close_weights(single.weights_for_sync(), weights)
    assert (critic_dir / "sharded" / ".metadata").is_file()
    saved_critic = {**load_file(critic_dir / "model.safetensors"), **load_file(critic_dir / "value_head.safetensors")}
    assert_close_weights(expected_critic, saved_critic)


def test_two_rank_grpo_steps_match_one_process_and_resume_on_one_rank(tiny_model_dir, tmp_path):
    """seq-mean-token-mean, fixed-size micro-batches, two PPO epochs: 2 ranks equal 1 process;
    the sharded checkpoint exports a loadable model and resumes in one process (2 -> 1)."""
    first, second = make_experiences(seed=0), make_experiences(seed=1)
    single = Trainer(_grpo_seq_mean(tiny_model_dir), run_dir=tmp_path / "one")
    expected = [single.train_step(first)]
    after_first = {k: v.clone() for k, v in single.weights_for_sync().items()}
    expected.append(single.train_step(second))
    after_second = single.weights_for_sync()

    sharded = Trainer(_grpo_seq_mean(tiny_model_dir, data_parallel_size=2), run_dir=tmp_path / "two")
    try:
        got = [sharded.train_step(first)]
        assert_close_weights(after_first, sharded.weights_for_sync())
        path = sharded.save_checkpoint(export_hf=True)
        got.append(sharded.train_step(second))
        assert_close_weights(after_second, sharded.weights_for_sync())
    finally:
        sharded.close()
    for one, two in zip(expected, got):
        assert_close_metrics(one, two, ["actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac"])

    assert (path / "actor" / "sharded" / ".metadata").is_file() and ckpt.checkpoint_problem(tmp_path / "two", 1) is None
    exported = AutoModelForCausalLM.from_pretrained(path / "actor" / "huggingface").state_dict()
    assert_close_weights({k: after_first[k] for k in exported}, exported)

    resumed = Trainer(_grpo_seq_mean(tiny_model_dir), run_dir=tmp_path / "two")
    resumed.load_checkpoint(1)
    assert resumed.global_step == 1
    resumed_metrics = resumed.train_step(second)
    assert_close_metrics(expected[1], resumed_metrics, ["actor/pg_loss", "actor/grad_norm"])
    assert_close_weights(after_second, resumed.weights_for_sync())


def test_two_rank_ddp_keeps_whole_weights_on_each_rank_and_matches_one_process(tiny_model_dir, tmp_path):
    """trainer_strategy ddp: every rank holds the whole actor (no shard), the steps equal one
    process's, and its checkpoint resumes in one process."""
    first, second = make_experiences(seed=0), make_experiences(seed=1)
    single = Trainer(_grpo_seq_mean(tiny_model_dir), run_dir=tmp_path / "one")
    expected = [single.train_step(first), single.train_step(second)]
    after_second = single.weights_for_sync()

    replicated = Trainer(_grpo_seq_mean(tiny_model_dir, data_parallel_size=2, strategy="ddp"), run_dir=tmp_path / "two")
    try:
        weights = dict(replicated.actor.named_parameters())
        assert all(w.to_local().shape == w.shape for w in weights.values())
        got = [replicated.train_step(first)]
        replicated.save_checkpoint(export_hf=False)
        got.append(replicated.train_step(second))
        assert_close_weights(after_second, replicated.weights_for_sync())
    finally:
        replicated.close()
    for one, two in zip(expected, got):
        assert_close_metrics(one, two, ["actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac"])

    resumed = Trainer(_grpo_seq_mean(tiny_model_dir), run_dir=tmp_path / "two")
    resumed.load_checkpoint(1)
    assert_close_metrics(expected[1], resumed.train_step(second), ["actor/pg_loss", "actor/grad_norm"])
    assert_close_weights(after_second, resumed.weights_for_sync())


def test_sharded_checkpoint_sync_writes_one_bucket_at_a_time(tiny_model_dir, tmp_path, monkeypatch):
    """The checkpoint transport of a 2-rank trainer: rank 0 gathers, writes and drops each bucket
    before the next (no earlier bucket is alive at a write), and the files hold exactly the
    weights a one-process trainer syncs after the same step."""
    import gc
    import weakref

    from trivium.sync.synchronizer import WeightUpdate, sync_weights_dir
    from trivium.trainer import weight_source

    experiences = make_experiences(seed=0)
    single = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1), run_dir=tmp_path / "one")
    single.train_step(experiences)
    expected = single.weights_for_sync()

    written: list[list[weakref.ref]] = []
    alive_at_write: list[int] = []
    real_save = weight_source.save_file

    def watching_save(bucket, path):
        gc.collect()
        alive_at_write.append(sum(ref() is not None for refs in written for ref in refs))
        written.append([weakref.ref(t) for t in bucket.values()])
        real_save(bucket, path)

    monkeypatch.setattr(weight_source, "save_file", watching_save)
    sharded = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1, data_parallel_size=2), run_dir=tmp_path / "two")
    try:
        sharded.train_step(experiences)
        directory = sync_weights_dir(tmp_path / "two", sharded.model_version)
        bucket_bytes = 512 * 1024  # several buckets of the 3.3 MB model; each gc.collect() below costs tenths of a second
        metrics = sharded.write_sync_weights(str(directory), bucket_bytes=bucket_bytes)
    finally:
        sharded.close()

    largest_tensor = max(t.numel() * t.element_size() for t in expected.values())
    assert metrics["sync/buckets"] == len(written) >= 3
    assert metrics["sync/largest_bucket_bytes"] < bucket_bytes + largest_tensor
    assert alive_at_write == [0] * len(written)  # every earlier bucket was freed before the next write
    assert_close_weights(expected, WeightUpdate(version=1, path=str(directory)).load())


def test_staged_shards_stream_the_staged_version_one_bucket_at_a_time(tiny_model_dir, tmp_path):
    """The broadcast transport of a 2-rank trainer: each rank keeps its shards of version 1,
    the trainer takes another step, and then the gather sends version 1 (not the newer
    weights) bucket by bucket, each bucket freed before the next is gathered."""
    import gc
    import weakref

    from trivium.sync.collective import buckets

    first, second = make_experiences(seed=0), make_experiences(seed=1)
    single = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1), run_dir=tmp_path / "one")
    single.train_step(first)
    version_one = single.weights_for_sync()

    bucket_bytes = 512 * 1024  # several buckets of the 3.3 MB model; each gc.collect() below costs tenths of a second
    sent: list[list[torch.Tensor]] = []
    alive_at_send: list[int] = []
    earlier: list[weakref.ref] = []

    def send(tensors):
        gc.collect()
        alive_at_send.append(sum(ref() is not None for ref in earlier))
        earlier.extend(weakref.ref(t) for t in tensors)
        sent.append([t.detach().clone() for t in tensors])
        return sum(t.numel() * t.element_size() for t in tensors)

    sharded = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1, data_parallel_size=2), run_dir=tmp_path / "two")
    try:
        sharded.train_step(first)
        spec = sharded.stage_shards(sharded.model_version)
        sharded.train_step(second)  # training goes on; the staged version stays as it was
        total = sharded.send_staged_shards(1, bucket_bytes=bucket_bytes, send=send)
    finally:
        sharded.close()

    expected_buckets = list(buckets(spec, bucket_bytes))
    assert len(sent) == len(expected_buckets) >= 3
    assert alive_at_send == [0] * len(sent)  # every earlier bucket was freed before the next gather
    received = {name: tensor for bucket, tensors in zip(expected_buckets, sent) for (name, _, _), tensor in zip(bucket, tensors)}
    assert total == sum(t.numel() * t.element_size() for t in received.values())
    assert_close_weights(version_one, received)


def test_two_rank_step_with_gradient_checkpointing_matches_one_process_without(tiny_model_dir, tmp_path):
    """Non-reentrant checkpointing recomputes each block inside FSDP2's hooks: the 2-rank step
    with it equals the 1-process step without it (loss, gradient norm, updated weights)."""
    experiences = make_experiences(seed=0)
    single = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1), run_dir=tmp_path / "one")
    expected = single.train_step(experiences)
    expected_weights = single.weights_for_sync()

    sharded = Trainer(
        _grpo_seq_mean(tiny_model_dir, ppo_epochs=1, data_parallel_size=2, gradient_checkpointing=True),
        run_dir=tmp_path / "two",
    )
    try:
        assert sharded.actor.is_activation_checkpointing
        got = sharded.train_step(experiences)
        weights = sharded.weights_for_sync()
    finally:
        sharded.close()
    assert expected["actor/grad_norm"] > 0
    assert_close_metrics(expected, got, ["actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac"])
    assert_close_weights(expected_weights, weights)


def test_a_plugin_loss_reaches_every_rank(tiny_model_dir, tmp_path, monkeypatch):
    """A loss registered by a --plugin-dir file is found by the ranks this process starts too."""
    from trivium import registry
    from trivium.registry import load_plugin_dir

    monkeypatch.setattr(registry, "_plugin_dirs", list(registry._plugin_dirs))  # later tests load no plugins

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "rank_plugin_loss.py").write_text(
        "from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, ppo_policy_loss\n"
        "POLICY_LOSS_FNS.register('ppo_from_a_plugin')(ppo_policy_loss)\n"
    )
    load_plugin_dir(plugins)
    loss = LossSettings(policy_loss_fn="ppo_from_a_plugin", advantage_fn="grpo")
    expected = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1, loss=loss), run_dir=tmp_path / "one").train_step(
        make_experiences(seed=0)
    )
    sharded = Trainer(_grpo_seq_mean(tiny_model_dir, ppo_epochs=1, loss=loss, data_parallel_size=2), run_dir=tmp_path / "two")
    try:
        got = sharded.train_step(make_experiences(seed=0))
    finally:
        sharded.close()
    assert_close_metrics(expected, got, ["actor/pg_loss", "actor/grad_norm"])
