"""What the scaling sweep's two workers share: the points, the models, the prompts, the reward
and the measurement record.

A point is one setting of (model, response length, group size, prompts per step). Each point
runs once per system, each in a process of its own, so that its peak RSS is its own.
"""

from __future__ import annotations

import json
import random
import resource
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
REPO = BENCHMARKS.parent
WORK = BENCHMARKS / ".work" / "scaling"

# Shared by both systems at every point.
LEARNING_RATE = 1e-5
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
CLIP_EPSILON = 0.2
TEMPERATURE = 1.0
NUM_PROMPTS = 1024  # the prompt pool; a run draws prompts_per_step of them per step

# The model axis's names and the `trivium init model --preset` each is built with.
MODEL_PRESETS = {"tiny": "tiny", "small": "small", "25m": "medium", "qwen2.5-0.5b": "qwen2.5-0.5b"}


@dataclass(frozen=True)
class Point:
    model: str  # tiny, small or 25m
    response_tokens: int  # every response is exactly this long
    group_size: int  # samples per prompt
    prompts_per_step: int  # the "batch" axis

    @property
    def rows(self) -> int:
        return self.group_size * self.prompts_per_step

    @property
    def key(self) -> str:
        return f"{self.model}-L{self.response_tokens}-G{self.group_size}-B{self.prompts_per_step}"

    def to_args(self) -> list[str]:
        return ["--model", self.model, "--response-tokens", str(self.response_tokens),
                "--group-size", str(self.group_size), "--prompts-per-step", str(self.prompts_per_step)]


@dataclass
class Measurement:
    """One system at one point: per timed step, seconds of the whole step and of its rollout."""

    system: str
    point: dict
    step_seconds: list[float] = field(default_factory=list)
    rollout_seconds: list[float] = field(default_factory=list)
    rollout_tokens: int = 0  # response tokens generated per step
    train_tokens: int = 0  # prompt + response tokens trained on per step
    peak_rss_mb: float = 0.0
    params: int = 0
    # Seconds of each piece of the step (mean over the timed steps), where the system exposes them.
    pieces: dict[str, float] = field(default_factory=dict)
    error: str = ""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @staticmethod
    def load(path: Path) -> Measurement:
        return Measurement(**json.loads(path.read_text()))


def point_arguments():
    """The command line of both workers: a point, the step counts, where to write."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--response-tokens", type=int, required=True)
    parser.add_argument("--group-size", type=int, required=True)
    parser.add_argument("--prompts-per-step", type=int, required=True)
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--timed-steps", type=int, default=2)
    parser.add_argument("--prompt-words", type=int, default=0, help="pad each question to about this many words")
    parser.add_argument("--logit-chunk-tokens", type=int, default=None,
                        help="trivium: trainer.logit_chunk_tokens (default: chosen from the vocabulary; 0: whole head)")
    parser.add_argument("--out", type=Path, required=True)
    return parser


def point_from(args) -> Point:
    return Point(args.model, args.response_tokens, args.group_size, args.prompts_per_step)


def model_dir(name: str) -> Path:
    """The model's directory under benchmarks/.work/scaling, built on first use (same seed: same weights)."""
    out = WORK / "models" / name
    if (out / "config.json").exists():
        return out
    sys.path.insert(0, str(REPO))
    from trivium.models import tiny
    from trivium.models.real_shapes import REAL_SHAPES, build_real_shape_model

    partial = out.with_name(name + ".partial")
    if partial.exists():
        import shutil

        shutil.rmtree(partial)
    if MODEL_PRESETS[name] in REAL_SHAPES:  # the public architecture at full depth, random weights
        build_real_shape_model(partial, MODEL_PRESETS[name], seed=0)
    else:
        tiny.build_tiny_model(partial, preset=MODEL_PRESETS[name], seed=0)
    partial.rename(out)
    return out


def questions(count: int = NUM_PROMPTS, seed: int = 0, words: int = 0) -> list[str]:
    """Short arithmetic questions: prompts of a near-constant length (about 20 tokens with the
    chat template); ``words`` prefixes each with numbers to about that many words."""
    rng = random.Random(seed)
    asked = [f"What is {rng.randint(10, 99)} + {rng.randint(10, 99)}?" for _ in range(count)]
    if words <= 4:
        return asked
    return [" ".join(str(rng.randint(10, 99)) for _ in range(words - 4)) + ". " + q for q in asked]


def prompt_messages(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def reward(text: str) -> float:
    """A cheap reward that differs between samples, so GRPO's advantages are not all zero."""
    return sum(ch.isdigit() for ch in text) / max(1, len(text))


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def count_parameters(model) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
