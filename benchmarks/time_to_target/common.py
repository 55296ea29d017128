"""What every system in the time-to-target benchmark shares: the tasks, the settings, the
stopping rule, the held-out evaluation and the result record.

Each run happens in its own process (``trl_run.py`` or ``trivium_run.py``), so that peak RSS
and start-up cost belong to one system only. The parent (``run.py``) interleaves the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Shared by every system: the same task, model, group size, batch, learning rate and
# temperature, no KL term, one optimizer step per batch of 16 prompts x 8 samples.
GROUP_SIZE = 8
PROMPTS_PER_STEP = 16
LEARNING_RATE = 3e-4  # the default; run.py's sweep picks each system's own (see --lr-sweep)
TEMPERATURE = 1.0
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
CLIP_EPSILON = 0.2

# The target: the mean training reward over the last WINDOW steps reaches the task's target.
# One step's mean (128 samples) is noisy; a 5-step window (640 samples) is not.
WINDOW = 5


@dataclass(frozen=True)
class Task:
    """One race: the data, the SFT warm-up every system starts from, the reward and the target.

    Every system starts from the first SFT checkpoint whose sampled accuracy on the training
    questions reaches ``start_accuracy``. SFT learns a task abruptly, at a step that varies
    with the machine (floating-point order) and the data order, so a fixed step would start
    the race from very different models on different machines; a fixed accuracy does not.
    """

    name: str
    data_args: tuple[str, ...]  # for `trivium init data`
    sft_config: str  # next to this file
    reward_fn: str  # a trivium reward function; its "accuracy" component scores held-out answers
    max_prompt_tokens: int
    max_response_tokens: int
    start_accuracy: float
    target_reward: float
    work_subdir: str  # under the benchmark's work dir

    @property
    def max_model_len(self) -> int:
        return self.max_prompt_tokens + self.max_response_tokens

    def reward(self, response: str, ground_truth: str) -> dict[str, float]:
        from trivium.rewards import REWARD_FNS

        return REWARD_FNS.get(self.reward_fn)(prompt="", response=response, ground_truth=ground_truth)


TASKS = {
    # Two-digit addition: the warm-up does most of the work, RL polishes.
    "arithmetic": Task(
        name="arithmetic", data_args=("--task", "arithmetic", "--num-train", "2000", "--num-test", "200"),
        sft_config="sft.yaml", reward_fn="math_reward", max_prompt_tokens=32, max_response_tokens=10,
        start_accuracy=0.3, target_reward=0.75, work_subdir="",
    ),
    # Countdown with three numbers: the warm-up teaches the answer format and a few solutions;
    # RL has to find most of the accuracy (reward 1 for a correct equation, 0.1 for a
    # well-formed wrong one).
    "countdown": Task(
        name="countdown", data_args=("--task", "countdown", "--num-train", "4000", "--num-test", "200"),
        sft_config="sft_countdown.yaml", reward_fn="countdown_reward", max_prompt_tokens=64,
        max_response_tokens=20, start_accuracy=0.1, target_reward=0.35, work_subdir="countdown",
    ),
}


@dataclass
class StepRecord:
    step: int
    wall: float  # seconds since the process started
    reward: float


@dataclass
class RunResult:
    system: str
    seed: int
    steps: list[StepRecord] = field(default_factory=list)
    seconds_to_target: float | None = None
    step_reached: int | None = None
    peak_rss_mb: float = 0.0
    heldout_accuracy: float | None = None
    stopped_by: str = ""
    # Seconds each side waited on the other over the run (time/idle_explorer, time/idle_trainer).
    idle_seconds: dict[str, float] = field(default_factory=dict)

    def median_step_seconds(self) -> float | None:
        """Median wall time between consecutive steps, skipping the first (warm-up)."""
        walls = [s.wall for s in self.steps]
        gaps = [b - a for a, b in zip(walls[1:], walls[2:])]
        return statistics.median(gaps) if gaps else None

    def first_step_seconds(self) -> float | None:
        """Seconds from the process start to the end of the first step: start-up plus one step."""
        return self.steps[0].wall if self.steps else None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @staticmethod
    def load(path: Path) -> RunResult:
        data = json.loads(path.read_text())
        data["steps"] = [StepRecord(**s) for s in data["steps"]]
        return RunResult(**data)


class TargetWatch:
    """Records each step's mean reward; says when the windowed mean first reaches the target."""

    def __init__(self, result: RunResult, process_start: float, target_reward: float):
        self.result = result
        self.process_start = process_start
        self.target_reward = target_reward

    def record(self, step: int, reward: float) -> bool:
        """Record one step; True once the target has been reached."""
        wall = time.time() - self.process_start
        self.result.steps.append(StepRecord(step, wall, float(reward)))
        if self.result.seconds_to_target is None:
            recent = [s.reward for s in self.result.steps[-WINDOW:]]
            if len(recent) == WINDOW and statistics.fmean(recent) >= self.target_reward:
                self.result.seconds_to_target = wall
                self.result.step_reached = step
        return self.result.seconds_to_target is not None


def run_arguments() -> argparse.ArgumentParser:
    """The command line every single-run script takes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True, help="the SFT checkpoint to start from")
    parser.add_argument("--data", type=Path, required=True, help="folder with train.jsonl and test.jsonl")
    parser.add_argument("--task", choices=list(TASKS), default="arithmetic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=LEARNING_RATE)
    parser.add_argument("--out", type=Path, required=True, help="where to write the RunResult (JSON)")
    return parser


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_rows(data_dir: Path, split: str) -> list[dict]:
    with open(data_dir / f"{split}.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def prompt_messages(question: str) -> list[dict]:
    # The SFT stage taught the format without a system prompt, so none is used anywhere.
    return [{"role": "user", "content": question}]


def heldout_accuracy(model_dir: Path, data_dir: Path, task: Task) -> float:
    """Greedy accuracy on the test split with plain ``model.generate``: neutral to every system."""
    return answer_accuracy(model_dir, load_rows(data_dir, "test"), task=task, sample=False)


def sampled_accuracy(model_dir: Path, data_dir: Path, task: Task, questions: int = 128, samples: int = 4) -> float:
    """Accuracy of ``samples`` temperature-1 answers to the first ``questions`` training questions."""
    rows = load_rows(data_dir, "train")[:questions]
    return answer_accuracy(model_dir, rows, task=task, sample=True, samples=samples)


def answer_accuracy(model_dir: Path, rows: list[dict], *, task: Task, sample: bool, samples: int = 1) -> float:
    """Fraction of correct answers from plain ``model.generate``, greedy or sampled at temperature 1."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [
        tokenizer.apply_chat_template(prompt_messages(row["question"]), tokenize=False, add_generation_prompt=True)
        for row in rows
    ]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    torch.manual_seed(0)
    with torch.no_grad():
        output = model.generate(
            **batch, **sampling, max_new_tokens=task.max_response_tokens, num_return_sequences=samples,
            pad_token_id=tokenizer.pad_token_id,
        )
    responses = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    # generate returns the samples of one prompt next to each other.
    answers = [row["answer"] for row in rows for _ in range(samples)]
    correct = [task.reward(r, a)["accuracy"] for r, a in zip(responses, answers)]
    return statistics.fmean(correct)


def run_in_process(script: Path, args: list[str], *, out: Path, log: Path, label: str, cwd: Path) -> RunResult:
    """Run one system (``script`` with ``args`` and ``--out out``) in a process of its own; its result.

    The console output goes to ``log``; a failed run ends the benchmark, naming the log.
    """
    start = time.time()
    with open(log, "w") as handle:
        code = subprocess.run([sys.executable, str(script), *args, "--out", str(out)], cwd=cwd, stdout=handle,
                              stderr=subprocess.STDOUT, timeout=1800,
                              env=dict(os.environ, TQDM_DISABLE="1")).returncode
    if code != 0:
        raise SystemExit(f"{label} failed (exit {code}); its output is in {log}")
    result = RunResult.load(out)
    reached = f"{result.seconds_to_target:.1f}s at step {result.step_reached}" if result.seconds_to_target else "not reached"
    print(f"{label}: target {reached}; held-out {result.heldout_accuracy:.1%}; {time.time() - start:.0f}s total",
          flush=True)
    return result
