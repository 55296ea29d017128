"""One point of the scaling sweep with trivium: the ``hf`` engine samples, ``Trainer.train_step``
updates (GRPO), the new weights go back to the engine; writes a Measurement.

    python benchmarks/scaling/trivium_point.py --model tiny --response-tokens 64 --group-size 8 \
        --prompts-per-step 8 --out FILE.json

A step is what a ``colocate`` run does in one process: render and tokenize the prompts, one
engine call (``n`` = group size, every response forced to exactly ``--response-tokens``
tokens), score the responses, build the experiences, ``train_step``, hand the weights back.
Every stage of the step is timed by wrapping the functions that do it (a few
``perf_counter`` calls per micro-batch), so the pieces come from the timed steps themselves.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from functools import wraps
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import points


class StageClock:
    """Seconds spent inside wrapped callables, summed per label."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, owner, attribute: str, label: str) -> None:
        original = getattr(owner, attribute)

        @wraps(original)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start

        setattr(owner, attribute, timed)

    def reset(self) -> None:
        self.seconds.clear()


def build_system(model_path: str, run_dir: Path, logit_chunk_tokens: int | None = None):
    """The engine and the trainer as ``colocate`` holds them when it syncs every step: the engine
    computes with the trainer's tensors (one copy of the weights)."""
    from trivium.models.engine.hf import HFEngine
    from trivium.trainer.settings import LossSettings, TrainerSettings
    from trivium.trainer.trainer import Trainer

    engine = HFEngine.from_pretrained(model_path, dtype="float32", seed=0)
    settings = TrainerSettings(
        model_path=model_path, lr=points.LEARNING_RATE, weight_decay=points.WEIGHT_DECAY,
        grad_clip=points.GRAD_CLIP, logit_chunk_tokens=logit_chunk_tokens,
        loss=LossSettings(policy_loss_fn="ppo", policy_loss_fn_args={"clip_range": points.CLIP_EPSILON},
                          advantage_fn="grpo", loss_agg_mode="token-mean"),
    )
    trainer = Trainer(settings, run_dir=run_dir, tokenizer=engine.tokenizer, pad_token_id=engine.pad_token_id)
    engine.hold_weights(trainer.weights_for_sync())
    return engine, trainer


def instrument(clock: StageClock, engine, trainer) -> None:
    """Time the engine's prefill and decode forwards and the trainer's stages."""
    import torch

    import trivium.trainer.trainer as trainer_module

    clock.wrap(engine.decoder, "prefill", "rollout: prefill")
    clock.wrap(engine.decoder, "decode", "rollout: decode forward")
    clock.wrap(trainer_module, "response_logprobs", "train: forward")
    clock.wrap(torch.Tensor, "backward", "train: backward")
    clock.wrap(trainer_module, "clip_gradients", "train: grad clip")
    clock.wrap(trainer.optimizer, "step", "train: optimizer")
    clock.wrap(trainer, "compute_advantages", "train: advantages")
    clock.wrap(trainer, "compute_old_logprobs", "train: old logprobs")


def rollout(engine, questions: list[str], point: points.Point, step: int, clock: StageClock):
    """Render, tokenize and sample the step's prompts; score them and build the experiences."""
    from trivium.core.experience import Experience
    from trivium.models.engine import SamplingParams

    start = time.perf_counter()
    tokenizer = engine.tokenizer
    prompt_ids = [
        tokenizer.apply_chat_template(points.prompt_messages(q), tokenize=True, add_generation_prompt=True)
        for q in questions
    ]
    prompt_ids = [list(getattr(p, "input_ids", p)) for p in prompt_ids]
    clock.seconds["rollout: prompts"] += time.perf_counter() - start
    params = SamplingParams(temperature=points.TEMPERATURE, max_tokens=point.response_tokens,
                            min_tokens=point.response_tokens, n=point.group_size)
    start = time.perf_counter()
    outputs = engine.generate(prompt_ids, params)
    clock.seconds["rollout: generate"] += time.perf_counter() - start
    start = time.perf_counter()
    experiences = []
    for index, samples in enumerate(outputs):
        for sample in samples:
            assert len(sample.token_ids) == point.response_tokens, len(sample.token_ids)
            experiences.append(Experience(
                tokens=sample.prompt_ids + sample.token_ids, prompt_length=len(sample.prompt_ids),
                logprobs=sample.logprobs, reward=points.reward(sample.text),
                group_id=f"s{step}p{index}", model_version=sample.model_version,
            ))
    clock.seconds["rollout: experiences"] += time.perf_counter() - start
    return experiences


def one_step(engine, trainer, questions, point, step: int, clock: StageClock) -> tuple[float, float, int, int]:
    """(step seconds, rollout seconds, response tokens, trained tokens) of one whole step."""
    start = time.perf_counter()
    experiences = rollout(engine, questions, point, step, clock)
    rollout_seconds = time.perf_counter() - start
    train_start = time.perf_counter()
    trainer.train_step(experiences)
    clock.seconds["train: train_step"] += time.perf_counter() - train_start
    sync_start = time.perf_counter()
    engine.update_weights(trainer.weights_for_sync(), trainer.model_version)
    clock.seconds["weight sync"] += time.perf_counter() - sync_start
    step_seconds = time.perf_counter() - start
    response_tokens = sum(e.response_length for e in experiences)
    return step_seconds, rollout_seconds, response_tokens, sum(e.tokens.numel() for e in experiences)


def pieces_of(clock: StageClock, steps: int) -> dict[str, float]:
    """Mean seconds per step of each piece; 'other' rows hold what the wrapped calls leave."""
    s = {k: v / steps for k, v in clock.seconds.items()}
    generate = s.get("rollout: generate", 0.0)
    s["rollout: sampling and loop"] = generate - s.get("rollout: prefill", 0.0) - s.get("rollout: decode forward", 0.0)
    train = s.get("train: train_step", 0.0)
    named = ("train: forward", "train: backward", "train: grad clip", "train: optimizer", "train: advantages",
             "train: old logprobs")
    s["train: other"] = train - sum(s.get(k, 0.0) for k in named)
    return s


def main() -> None:
    args = points.point_arguments().parse_args()
    point = points.point_from(args)
    result = points.Measurement(system="trivium", point=point.__dict__)
    import tempfile

    pool = points.questions(words=args.prompt_words)
    with tempfile.TemporaryDirectory() as run_dir:
        engine, trainer = build_system(str(points.model_dir(point.model)), Path(run_dir), args.logit_chunk_tokens)
        result.params = points.count_parameters(trainer.actor)
        clock = StageClock()
        instrument(clock, engine, trainer)
        for step in range(args.warmup_steps + args.timed_steps):
            if step == args.warmup_steps:
                clock.reset()
            questions = pool[step * point.prompts_per_step:(step + 1) * point.prompts_per_step]
            seconds, rollout_seconds, result.rollout_tokens, result.train_tokens = one_step(
                engine, trainer, questions, point, step, clock)
            if step >= args.warmup_steps:
                result.step_seconds.append(seconds)
                result.rollout_seconds.append(rollout_seconds)
            print(f"trivium {point.key} step {step}: {seconds:.2f}s (rollout {rollout_seconds:.2f}s)", flush=True)
        result.pieces = pieces_of(clock, args.timed_steps)
    result.peak_rss_mb = points.peak_rss_mb()
    result.save(args.out)


if __name__ == "__main__":
    main()
