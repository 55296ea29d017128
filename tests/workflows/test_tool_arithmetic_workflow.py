"""The tool_arithmetic workflow: call → tool result → answer, as one token-exact episode.

The model wrapper, the tiny-tools tokenizer and chat template, the hermes parser and the
calculator are the real ones; only the sampling is scripted (an engine that answers each
request with the next scripted reply), so each episode's path is known in advance.
"""

import pytest
import torch
from transformers import AutoTokenizer

from trivium.core.task import Task
from trivium.data.tool_arithmetic import tool_arithmetic_row
from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine
from trivium.models.wrapper import ModelWrapper
from trivium.workflows.registry import WORKFLOWS

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "47 * 86"}}\n</tool_call>'


class ScriptedEngine(InferenceEngine):
    """Samples the next scripted reply, tokenized, ended by ``<|im_end|>``."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params):
        outputs = []
        for prompt in prompts:
            self.prompts.append(list(prompt))
            text = self.replies.pop(0)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [
                self.tokenizer.convert_tokens_to_ids("<|im_end|>")
            ]
            outputs.append([GenerationOutput(list(prompt), ids, [-0.5] * len(ids), text, "stop")])
        return outputs

    def compute_logprobs(self, sequences, prompt_lengths):
        return [torch.full((len(s) - p,), -0.5) for s, p in zip(sequences, prompt_lengths)]

    def update_weights(self, state_dict, version):
        return version

    def version(self):
        return 0


@pytest.fixture(scope="module")
def tokenizer(tiny_tools_model_dir):
    return AutoTokenizer.from_pretrained(tiny_tools_model_dir)


def play(tokenizer, replies, *, parser="hermes", workflow="tool_arithmetic"):
    engine = ScriptedEngine(tokenizer, replies)
    model = ModelWrapper(engine, max_response_tokens=32, max_model_len=400, tool_call_parser=parser)
    task = Task(
        raw=tool_arithmetic_row(47, "*", 86),
        workflow=workflow,
        task_id="t-1",
        taskset_name="calc",
        format={"prompt_key": "question", "response_key": "answer"},
    )
    return WORKFLOWS.get(workflow)(task=task, model=model).run(), engine


def test_a_call_then_the_right_answer_is_one_rewarded_token_exact_episode(tokenizer):
    (episode,), engine = play(tokenizer, [CALL, "4042"])
    assert episode.reward == 1.0
    assert episode.metrics["accuracy"] == 1.0 and episode.metrics["tool_calls"] == 1.0
    assert episode.metrics["tool_errors"] == 0.0 and episode.metrics["env_steps"] == 2.0
    # The second request continues the first one's exact tokens, the tool's result after them.
    first, second = engine.prompts
    assert second[: len(first)] == first
    fed_back = tokenizer.decode(second[len(first) :])
    assert fed_back.startswith(CALL) and "<tool_response>\n4042\n</tool_response>" in fed_back
    # The tool signature is in the first prompt; the episode has exactly two model turns.
    assert '{"type": "function", "function": {"name": "calculator"' in tokenizer.decode(first)
    mask = episode.action_mask.int().tolist()
    assert sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])) == 2


def test_a_wrong_answer_or_no_call_earns_nothing(tokenizer):
    (wrong,), _ = play(tokenizer, [CALL, "4041"])
    (guess,), _ = play(tokenizer, ["4042"])  # right, but reached without the tool: still an answer
    assert wrong.reward == 0.0 and wrong.metrics["tool_calls"] == 1.0
    assert guess.reward == 1.0 and guess.metrics["tool_calls"] == 0.0


def test_a_refused_call_is_answered_with_the_error_and_counted(tokenizer):
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "os.system(1)"}}\n</tool_call>'
    (episode,), engine = play(tokenizer, [bad, bad, bad])
    assert episode.reward == 0.0 and episode.metrics["tool_errors"] == 3.0  # max_env_steps: 3 turns
    assert "error: only numbers" in tokenizer.decode(engine.prompts[1])


def test_step_wise_rows_are_one_per_model_turn_with_the_final_reward(tokenizer):
    steps, _ = play(tokenizer, [CALL, "4042"], workflow="tool_arithmetic_step_wise")
    assert [step.reward for step in steps] == [1.0, 1.0]
    assert len({step.episode_id for step in steps}) == 1


def test_without_a_tool_call_parser_the_workflow_says_what_to_set(tokenizer):
    with pytest.raises(UserError, match="tool_call_parser: hermes and enable_auto_tool_choice: true"):
        play(tokenizer, [CALL], parser=None)
