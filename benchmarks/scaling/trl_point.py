"""One point of the scaling sweep with TRL's ``GRPOTrainer`` (CPU, float32, no vLLM); writes a
Measurement.

    python benchmarks/scaling/trl_point.py --model tiny --response-tokens 64 --group-size 8 \
        --prompts-per-step 8 --out FILE.json

The settings follow ``benchmarks/time_to_target/trl_run.py``: float32 (``bf16=False``), no
gradient checkpointing, one optimizer step per generation batch, no KL term. Responses are
forced to exactly ``--response-tokens`` tokens with ``min_new_tokens``. The step time is the
gap between consecutive ``on_step_end`` callbacks (everything TRL does in a step); the rollout
part is ``_generate_and_score_completions`` (tokenize, ``model.generate``, rewards,
advantages), timed by a subclass. The token counts are read from that method's own masks.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import points


def make_trainer(point: points.Point, steps: int, output_dir: str, result: points.Measurement, prompt_words: int = 0):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model_path = points.model_dir(point.model)
    rollout_seconds: list[float] = []
    step_ends: list[float] = []

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            start = time.perf_counter()
            output = super()._generate_and_score_completions(inputs)
            rollout_seconds.append(time.perf_counter() - start)
            completion = int(output["completion_mask"].sum())
            assert completion == point.rows * point.response_tokens, completion
            result.rollout_tokens = completion
            result.train_tokens = completion + int(output["prompt_mask"].sum())
            return output

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())

    def digits(completions: list, **_: object) -> list[float]:
        return [points.reward(completion[0]["content"]) for completion in completions]

    dataset = Dataset.from_list([{"prompt": points.prompt_messages(q)} for q in points.questions(words=prompt_words)])
    config = GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=False, gradient_checkpointing=False, seed=0,
        max_steps=steps, num_generations=point.group_size, per_device_train_batch_size=point.rows,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        learning_rate=points.LEARNING_RATE, lr_scheduler_type="constant", weight_decay=points.WEIGHT_DECAY,
        max_grad_norm=points.GRAD_CLIP, epsilon=points.CLIP_EPSILON, beta=0.0, temperature=points.TEMPERATURE,
        max_completion_length=point.response_tokens,
        generation_kwargs={"min_new_tokens": point.response_tokens},
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
    )
    # float32 whatever the model's config says (a real-shape preset's says bfloat16, which
    # from_pretrained would load, and which runs several times slower on a CPU without bf16 units).
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    result.params = points.count_parameters(model)
    trainer = TimedGRPOTrainer(
        model=model, processing_class=AutoTokenizer.from_pretrained(model_path), reward_funcs=digits,
        args=config, train_dataset=dataset, callbacks=[StepClock()],
    )
    return trainer, rollout_seconds, step_ends


def main() -> None:
    args = points.point_arguments().parse_args()
    point = points.point_from(args)
    result = points.Measurement(system="trl", point=point.__dict__)
    steps = args.warmup_steps + args.timed_steps
    with tempfile.TemporaryDirectory() as output_dir:
        trainer, rollout_seconds, step_ends = make_trainer(point, steps, output_dir, result, args.prompt_words)
        trainer.train()
    step_seconds = [b - a for a, b in itertools.pairwise(step_ends)]
    for step, (seconds, rollout) in enumerate(zip(step_seconds, rollout_seconds)):
        print(f"trl {point.key} step {step}: {seconds:.2f}s (rollout {rollout:.2f}s)", flush=True)
    result.step_seconds = step_seconds[args.warmup_steps:]
    result.rollout_seconds = rollout_seconds[args.warmup_steps:]
    timed = max(1, len(result.step_seconds))
    rollout = sum(result.rollout_seconds) / timed
    result.pieces = {"rollout: generate and score": rollout,
                     "train: the rest of the step": sum(result.step_seconds) / timed - rollout}
    result.peak_rss_mb = points.peak_rss_mb()
    result.save(args.out)


if __name__ == "__main__":
    main()
