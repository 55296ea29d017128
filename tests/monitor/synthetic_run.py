"""A synthetic run directory with known numbers, shared by the summary, plot and report tests.

Explorer steps 1..20: reward = 0.1 + 0.04 * step (rising), response length 100 - step,
throughput 1000 tokens/s and 16 experiences/s; eval of taskset ``arith`` every 5 steps with
accuracies 0.2, 0.6, 0.4, 0.5. Trainer steps 1..20: pg_loss = 1 / step, kl = 0.01 * step,
entropy = 2 - 0.05 * step, staleness/mean 1 on odd steps and 0 on even ones, staleness/max 2
at step 7 and 1 elsewhere. Times: explorer step s at t0 + 10 s, trainer at t0 + 10 s + 5.
"""

from __future__ import annotations

import json
from pathlib import Path

T0 = 1_700_000_000.0
STEPS = 20
EVAL_ACCURACIES = {5: 0.2, 10: 0.6, 15: 0.4, 20: 0.5}


def reward_at(step: int) -> float:
    return 0.1 + 0.04 * step


def synthetic_records() -> list[dict]:
    records = []
    for step in range(1, STEPS + 1):
        records.append(
            {
                "role": "explorer",
                "step": step,
                "time": T0 + 10 * step,
                "rollout/reward_mean": reward_at(step),
                "rollout/response_length_mean": 100.0 - step,
                "time/throughput_tokens_per_s": 1000.0,
                "time/throughput_experiences_per_s": 16.0,
            }
        )
        if step in EVAL_ACCURACIES:
            records.append(
                {
                    "role": "explorer",
                    "step": step,
                    "time": T0 + 10 * step + 1,
                    "eval/arith/accuracy": EVAL_ACCURACIES[step],
                }
            )
        records.append(
            {
                "role": "trainer",
                "step": step,
                "time": T0 + 10 * step + 5,
                "actor/pg_loss": 1.0 / step,
                "actor/kl_loss": 0.01 * step,
                "actor/entropy": 2.0 - 0.05 * step,
                "staleness/mean": 1.0 if step % 2 else 0.0,
                "staleness/max": 2.0 if step == 7 else 1.0,
            }
        )
    return records


def write_synthetic_run(run_dir: Path, *, checkpoint_steps: tuple[int, ...] = (10, 20)) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(record) for record in synthetic_records()]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "config.resolved.yaml").write_text(
        "project: demo\nname: rising\nalgorithm:\n  algorithm_type: grpo\n"
    )
    for step in checkpoint_steps:
        actor = run_dir / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return run_dir
