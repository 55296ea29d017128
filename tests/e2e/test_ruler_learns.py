"""RULER in a run: a judge served as an auxiliary engine scores each group, and the policy
learns from its scores.

The judge is a plugin engine (``engine_type: length_judge:create``) behind trivium's own
wrapper: it reads the candidates from the RULER prompt it is sent and answers the list
``[s_1, ..., s_n]`` with s_i = max(0, 1 - len(candidate_i) / 24). A tiny model cannot follow
a grading rubric, so a rule stands in for the judge's opinion; what is under test is the
path from the policy's samples to the judge, the parsing of its verdict, the rewards and
the training on them. The untrained model rambles to its token limit, so the judge's scores
start low and rise only if the policy learns to answer shortly.
"""

import textwrap

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

LENGTH_JUDGE = textwrap.dedent(
    """
    import re

    import torch
    from transformers import AutoTokenizer

    from trivium.models.engine.base import GenerationOutput, InferenceEngine

    CANDIDATE = re.compile(r"Candidate \\d+:\\n(.*?)(?=\\n\\nCandidate \\d+:|\\n\\nScore every)", re.S)


    class LengthJudge(InferenceEngine):
        def __init__(self, model_path):
            self.tokenizer = AutoTokenizer.from_pretrained(model_path)

        def generate(self, prompts, params):
            params = params if isinstance(params, (list, tuple)) else [params] * len(prompts)
            outputs = []
            for prompt, each in zip(prompts, params):
                candidates = CANDIDATE.findall(self.tokenizer.decode(prompt))
                text = "[" + ", ".join(f"{max(0.0, 1 - len(c) / 24):.4f}" for c in candidates) + "]"
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                outputs.append([GenerationOutput(list(prompt), ids, [0.0] * len(ids), text, "stop")] * each.n)
            return outputs

        def compute_logprobs(self, sequences, prompt_lengths):
            return [torch.zeros(len(s) - p) for s, p in zip(sequences, prompt_lengths)]

        def update_weights(self, state_dict, version):
            return 0

        def version(self):
            return 0


    def create(model_path=None, **kwargs):
        return LengthJudge(model_path)
    """
)
STEPS = 12


@pytest.mark.slow
def test_policy_learns_from_a_ruler_judge(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "length_judge.py").write_text(LENGTH_JUDGE)
    config = base_config(
        assets, tmp_path / "runs", **{"buffer.explorer_input.default_workflow_type": "math_ruler"}
    )
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    config["buffer"]["total_steps"] = STEPS
    config["buffer"]["batch_size"] = 8
    config["explorer"]["auxiliary_models"] = [
        {
            "model_path": assets["model"],
            "engine_type": "length_judge:create",
            "max_model_len": 1024,
            "max_prompt_tokens": 960,
            "max_response_tokens": 64,
        }
    ]
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0
    records = read_metrics(tmp_path / "runs" / "e2e" / "run")
    explorer = [r for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r]
    assert len(explorer) == STEPS
    judged = [key for key in explorer[0] if "judge_success" in key]
    assert judged and all(r[judged[0]] == 1.0 for r in explorer), judged  # every verdict parsed
    rewards = [r["rollout/reward_mean"] for r in explorer]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"judge's reward {first:.3f} -> {last:.3f}"
