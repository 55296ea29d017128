"""Every algorithm preset runs end to end on the tiny model and improves a toy objective."""

import textwrap
from pathlib import Path

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

RL_PRESETS = ["ppo", "grpo", "opmd", "rloo", "reinforceplusplus", "gspo", "cispo"]

# The toy objective: short answers. The untrained model rambles to the token limit; every
# algorithm should learn to end its answer sooner within a few steps.
SHORT_ANSWER_REWARD = textwrap.dedent(
    """
    from trivium.rewards import REWARD_FNS

    @REWARD_FNS.register("short_answer")
    def short_answer(*, prompt, response, ground_truth, **kwargs):
        return max(0.0, 1.0 - len(response) / 24)

    @REWARD_FNS.register("signed_short_answer")
    def signed_short_answer(*, prompt, response, ground_truth, **kwargs):
        return 2.0 * short_answer(prompt=prompt, response=response, ground_truth=ground_truth) - 1.0
    """
)
STEPS = 12


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["colocate", "both"])
@pytest.mark.parametrize("algorithm", RL_PRESETS)
def test_rl_preset_learns_a_toy_objective(assets, tmp_path, algorithm, mode):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = base_config(assets, tmp_path / "runs", mode=mode, **{"algorithm.algorithm_type": algorithm})
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    config["buffer"]["total_steps"] = STEPS
    config["buffer"]["explorer_input"]["default_reward_fn_type"] = "short_answer"
    config["buffer"]["batch_size"] = 8
    if algorithm in ("ppo", "reinforceplusplus"):
        config["algorithm"]["repeat_times"] = 2
        config["buffer"]["batch_size"] = 16
    if algorithm == "ppo":
        config["trainer"]["trainer_config"] = {"critic": {"optim": {"lr": 1e-3}}}
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0
    run_dir = tmp_path / "runs" / "e2e" / "run"
    records = read_metrics(run_dir)
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    rewards = [r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r]
    assert len(rewards) == STEPS and len(trainer_steps) == STEPS
    assert all(r["actor/grad_norm"] == r["actor/grad_norm"] for r in trainer_steps)  # no NaN
    if algorithm == "ppo":
        assert "critic/vf_loss" in trainer_steps[-1]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"{algorithm}/{mode}: reward {first:.3f} -> {last:.3f}"
    assert (run_dir / f"global_step_{STEPS}" / "actor" / "model.safetensors").exists()


@pytest.mark.slow
def test_sft_then_dpo_in_train_mode(assets, tmp_path):
    import json

    pairs = tmp_path / "pairs"
    pairs.mkdir()
    with open(pairs / "train.jsonl", "w") as out:
        for a in range(10, 26):
            out.write(json.dumps({"prompt": f"What is {a} + 1?", "chosen": f"<answer>{a + 1}</answer>", "rejected": f"<answer>{a}</answer>"}) + "\n")
    sft = base_config(assets, tmp_path / "runs", mode="train", name="sft")
    sft["algorithm"] = {"algorithm_type": "sft", "optimizer": {"lr": 1e-3}}
    sft["buffer"] = {
        "train_batch_size": 16,
        "total_steps": 3,
        "trainer_input": {
            "experience_buffer": {
                "name": "sft", "storage_type": "file", "path": assets["data"],
                "format": {"prompt_key": "question", "response_key": "response"},
            }
        },
    }
    assert main(["run", "--config", write_config(tmp_path, sft)]) == 0
    sft_records = [r for r in read_metrics(tmp_path / "runs" / "e2e" / "sft") if "actor/pg_loss" in r]
    assert len(sft_records) == 3 and sft_records[-1]["actor/pg_loss"] < sft_records[0]["actor/pg_loss"]

    dpo = dict(sft, name="dpo")
    dpo["algorithm"] = {"algorithm_type": "dpo", "optimizer": {"lr": 1e-3}}
    dpo["buffer"] = {
        "train_batch_size": 8,
        "total_steps": 4,
        "trainer_input": {
            "experience_buffer": {
                "name": "pairs", "storage_type": "file", "path": str(pairs),
                "format": {"prompt_key": "prompt", "chosen_key": "chosen", "rejected_key": "rejected"},
            }
        },
    }
    assert main(["run", "--config", write_config(tmp_path, dpo)]) == 0
    dpo_records = [r for r in read_metrics(tmp_path / "runs" / "e2e" / "dpo") if "actor/pg_loss" in r]
    assert len(dpo_records) == 4
    assert dpo_records[-1]["actor/pg_loss"] < dpo_records[0]["actor/pg_loss"]


@pytest.mark.slow
def test_mix_trains_on_rollouts_and_an_expert_sft_buffer(assets, tmp_path):
    config = base_config(assets, tmp_path / "runs", **{"algorithm.algorithm_type": "mix"})
    config["algorithm"]["sample_strategy_args"] = {"expert_data_ratio": 0.5}
    config["algorithm"]["policy_loss_fn_args"] = {"mu": 0.5}
    config["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "sft_dataset": {
            "name": "sft_dataset", "storage_type": "file", "path": assets["data"],
            "format": {"prompt_key": "question", "response_key": "response"},
        }
    }
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    records = [r for r in read_metrics(tmp_path / "runs" / "e2e" / "run") if "actor/pg_loss" in r]
    assert len(records) == 2
    # Half of each batch is expert data: 16 rollouts + 16 expert rows.
    assert records[0]["trainer/batch_size"] == 32
    assert any(key.startswith("actor/sft") or "expert" in key for key in records[0])


@pytest.mark.slow
def test_both_mode_stops_exploring_when_the_trainer_is_done(assets, tmp_path):
    config = base_config(assets, tmp_path / "runs", mode="both")
    config["buffer"]["total_steps"] = 30
    config["trainer"]["total_steps"] = 2
    config["buffer"]["trainer_input"]["experience_buffer"]["capacity"] = 16  # a full queue must not hang it
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    records = read_metrics(tmp_path / "runs" / "e2e" / "run")
    explorer_steps = [r for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r]
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    assert len(trainer_steps) == 2
    assert len(explorer_steps) < 30


# Presets added for parity with Trinity-RFT; colocate mode only, to keep the suite short.
MORE_RL_PRESETS = ["grpo_verl", "asymre", "topr", "sapo", "rec", "sppo", "raft", "remax"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", MORE_RL_PRESETS)
def test_more_rl_presets_learn_the_toy_objective(assets, tmp_path, algorithm):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = base_config(assets, tmp_path / "runs", **{"algorithm.algorithm_type": algorithm})
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    steps = STEPS
    config["buffer"]["explorer_input"]["default_reward_fn_type"] = "short_answer"
    config["buffer"]["batch_size"] = 8
    margin = 0.08
    if algorithm == "topr":
        # TOPR is built for signed rewards: with a [0, 1] reward every sample counts as good, the
        # tapered branch never runs and the update is reward-weighted SFT. The same objective on
        # [-1, 1] (twice the scale, so twice the margin) exercises both branches.
        config["buffer"]["explorer_input"]["default_reward_fn_type"] = "signed_short_answer"
        margin = 0.16
    if algorithm == "raft":
        # The raft preset trains on every rollout, as Trinity-RFT's does (its RAFT workflows keep only
        # the rewarded ones); these plain workflows keep all, so select the best samples by reward.
        config["algorithm"]["advantage_fn"] = "raft"
        config["algorithm"]["policy_loss_fn"] = "raft"
    if algorithm == "remax":
        # The greedy baseline often beats the early samples on this task, so the first
        # updates mostly push probability away; it needs a few more steps to climb.
        steps = 20
        config["algorithm"]["repeat_times"] = 2
        config["buffer"]["batch_size"] = 16
    config["buffer"]["total_steps"] = steps
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0
    records = read_metrics(tmp_path / "runs" / "e2e" / "run")
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    rewards = [r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r]
    assert len(rewards) == steps and len(trainer_steps) == steps
    assert all(r["actor/grad_norm"] == r["actor/grad_norm"] for r in trainer_steps)  # no NaN
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + margin, f"{algorithm}: reward {first:.3f} -> {last:.3f}"


@pytest.mark.slow
def test_mix_chord_learns_while_mixing_in_expert_rows(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = base_config(assets, tmp_path / "runs", **{"algorithm.algorithm_type": "mix_chord"})
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    config["algorithm"]["sample_strategy_args"] = {"expert_data_ratio": 0.2}
    # exact_part_means: each part a mean over its own rows, without the reference's batch-size weights
    config["algorithm"]["policy_loss_fn_args"] = {"mu_warmup_steps": 2, "mu_decay_steps": 6, "mu_peak": 0.3, "mu_valley": 0.05,
                                                  "exact_part_means": True}
    config["buffer"]["total_steps"] = STEPS
    config["buffer"]["batch_size"] = 8
    config["buffer"]["explorer_input"]["default_reward_fn_type"] = "short_answer"
    config["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "sft_dataset": {
            "name": "sft_dataset", "storage_type": "file", "path": assets["data"],
            "format": {"prompt_key": "question", "response_key": "response"},
        }
    }
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0
    records = read_metrics(tmp_path / "runs" / "e2e" / "run")
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    rewards = [r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r]
    assert len(trainer_steps) == STEPS
    # mu follows the schedule: 0 at the first step, the peak after the warm-up, the valley at the end
    mus = [r["actor/mu"] for r in trainer_steps]
    assert mus[0] == 0.0 and max(mus) == pytest.approx(0.3) and mus[-1] == pytest.approx(0.05)
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"mix_chord: reward {first:.3f} -> {last:.3f}"


DISTILL_STEPS = 40


def _sharpened_teacher(student_dir: str, out_dir) -> str:
    """A teacher with the student's tokenizer whose next-token distribution is the student's, sharpened
    (output logits times 3, with the output head untied from the input embeddings)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(student_dir, out_dir)
    model = AutoModelForCausalLM.from_pretrained(out_dir)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone() * 3.0)
    model.save_pretrained(out_dir)
    return str(out_dir)


def _probe_sequences(student_dir: str, data_dir: str, count: int = 16, new_tokens: int = 8) -> list[tuple[list[int], int]]:
    """Fixed sequences to measure the KL on: training prompts, each with a sampled continuation of the
    initial student (the distribution its on-policy samples come from). ``[(token ids, prompt length)]``."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(student_dir)
    model = AutoModelForCausalLM.from_pretrained(student_dir).eval()
    rows = [json.loads(line) for line in (Path(data_dir) / "train.jsonl").read_text().splitlines()[:count]]
    torch.manual_seed(0)
    sequences = []
    for row in rows:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": row["question"]}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=True, top_k=0,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        sequences.append((out[0].tolist(), len(prompt)))
    return sequences


def _exact_reverse_kl(student_dir: str, teacher_dir: str, sequences: list[tuple[list[int], int]]) -> float:
    """Mean over the response positions of KL(student || teacher), summed over the whole vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM

    student = AutoModelForCausalLM.from_pretrained(student_dir).eval()
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir).eval()
    total, positions = 0.0, 0
    with torch.no_grad():
        for ids, prompt_length in sequences:
            tokens = torch.tensor([ids])
            # The distributions that predict each response token: positions prompt_length - 1 .. len - 2.
            log_s = student(tokens).logits.log_softmax(-1)[0, prompt_length - 1: -1]
            log_t = teacher(tokens).logits.log_softmax(-1)[0, prompt_length - 1: -1]
            total += float((log_s.exp() * (log_s - log_t)).sum())
            positions += log_s.shape[0]
    return total / positions


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["on_policy_distill", "jsd"])
def test_distillation_brings_the_student_closer_to_the_teacher(assets, tmp_path, algorithm):
    teacher = _sharpened_teacher(assets["model"], tmp_path / "teacher")
    config = base_config(assets, tmp_path / "runs", **{"algorithm.algorithm_type": algorithm})
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    config["algorithm"]["repeat_times"] = 4
    config["buffer"]["total_steps"] = DISTILL_STEPS
    config["buffer"]["batch_size"] = 16
    config["explorer"]["auxiliary_models"] = [{"model_path": teacher, "max_model_len": 40}]
    if algorithm == "jsd":
        # The per-token divergence as the advantage (jsd's default, the reference system's) took this
        # KL from 0.11 to 7.2 here; the token's weight in the divergence's exact gradient lowers it.
        config["algorithm"]["advantage_fn_args"] = {"advantage": "gradient"}
    assert main(["run", "--config", write_config(tmp_path, config)]) == 0
    run_dir = tmp_path / "runs" / "e2e" / "run"
    kl = [r["distill/student_teacher_kl"] for r in read_metrics(run_dir) if "distill/student_teacher_kl" in r]
    assert len(kl) == DISTILL_STEPS  # the run's own estimate, one sampled token at a time, is logged each step
    # The sampled estimate is too noisy on 16 short answers a step to judge by; the exact KL over the
    # vocabulary, on the same fixed sequences before and after, is not.
    sequences = _probe_sequences(assets["model"], assets["data"])
    before = _exact_reverse_kl(assets["model"], teacher, sequences)
    after = _exact_reverse_kl(str(run_dir / f"global_step_{DISTILL_STEPS}" / "actor"), teacher, sequences)
    assert after < 0.8 * before, f"{algorithm}: KL(student || teacher) {before:.4f} -> {after:.4f}"
