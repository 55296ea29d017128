"""One TRL ``GRPOTrainer`` run (CPU, no vLLM) with the shared settings; writes a RunResult.

    python benchmarks/time_to_target/trl_run.py --model DIR --data DIR --seed S --out FILE.json
"""

from __future__ import annotations

import time

PROCESS_START = time.time()  # before the heavy imports: they are part of what a user waits for

import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import common  # noqa: E402


def main() -> None:
    parser = common.run_arguments()
    args = parser.parse_args()

    from datasets import Dataset
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    task = common.TASKS[args.task]
    result = common.RunResult(system="trl", seed=args.seed)
    watch = common.TargetWatch(result, PROCESS_START, task.target_reward)

    rows = common.load_rows(args.data, "train")
    dataset = Dataset.from_list(
        [{"prompt": common.prompt_messages(row["question"]), "answer": row["answer"]} for row in rows]
    )

    def accuracy(completions: list, answer: list, **_: object) -> list[float]:
        return [task.reward(completion[0]["content"], truth)["reward"] for completion, truth in zip(completions, answer)]

    class StopAtTarget(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs and watch.record(state.global_step, logs["reward"]):
                result.stopped_by = "target"
                control.should_training_stop = True

    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            use_cpu=True,
            # Every system computes in float32. TRL's default autocasts to bfloat16, which is
            # emulated (about 15x slower) on CPUs without bf16 instructions, and rounds
            # differently from the other systems where they exist.
            bf16=False,
            # GRPOConfig turns gradient checkpointing on by default; the other systems keep
            # their activations, and at this size recomputing them only costs time.
            gradient_checkpointing=False,
            seed=args.seed,
            max_steps=args.max_steps,
            num_generations=common.GROUP_SIZE,
            per_device_train_batch_size=common.GROUP_SIZE * common.PROMPTS_PER_STEP,
            gradient_accumulation_steps=1,
            steps_per_generation=1,
            num_iterations=1,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            weight_decay=common.WEIGHT_DECAY,
            max_grad_norm=common.GRAD_CLIP,
            epsilon=common.CLIP_EPSILON,
            beta=0.0,
            temperature=common.TEMPERATURE,
            max_completion_length=task.max_response_tokens,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
            processing_class=AutoTokenizer.from_pretrained(args.model),
            reward_funcs=accuracy,
            args=config,
            train_dataset=dataset,
            callbacks=[StopAtTarget()],
        )
        trainer.train()
        result.peak_rss_mb = common.peak_rss_mb()
        result.stopped_by = result.stopped_by or "max_steps"
        final_dir = Path(output_dir) / "final"
        trainer.save_model(str(final_dir))
        result.heldout_accuracy = common.heldout_accuracy(final_dir, args.data, task)
    result.save(args.out)


if __name__ == "__main__":
    main()
