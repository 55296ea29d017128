"""One trivium run (``colocate`` or ``both``, in this process or on Ray, with a chosen sync style) with the shared
settings; writes a RunResult.

A monitor plugin watches the rollout reward and calls ``request_stop`` once the target is
reached; the run then ends as any stopped run does (final checkpoint, summary).

    python benchmarks/time_to_target/trivium_run.py --mode colocate --model DIR --data DIR \
        --seed S --out FILE.json
"""

from __future__ import annotations

import time

PROCESS_START = time.time()  # before the heavy imports: they are part of what a user waits for

import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import common  # noqa: E402
from trivium.runtime.openmp_defaults import apply_openmp_defaults  # noqa: E402

apply_openmp_defaults()  # what the `trivium` command does first, before torch is imported

CONFIG = """
project: time_to_target
name: {mode}_seed{seed}
mode: {mode}
checkpoint_root_dir: {root}
seed: {seed}
model:
  model_path: {model}
  max_prompt_tokens: {max_prompt_tokens}
  max_response_tokens: {max_response_tokens}
  max_model_len: {max_model_len}
  temperature: {temperature}
cluster: {{node_num: 1, gpu_per_node: 0, placement: {placement}}}
algorithm:
  algorithm_type: grpo
  repeat_times: {group_size}
  kl_loss_fn: none
  optimizer: {{lr: {lr}, weight_decay: {weight_decay}}}
  policy_loss_fn_args: {{clip_range: {clip}}}
buffer:
  batch_size: {prompts}
  total_steps: {max_steps}
  explorer_input:
    default_workflow_type: {workflow}
    default_reward_fn_type: {reward_fn}
    taskset:
      name: {task}_train
      storage_type: file
      path: {data}
      split: train
      format: {{prompt_key: question, response_key: answer, system_prompt: ""}}
      task_selector: {{selector_type: shuffle}}
  trainer_input:
    experience_buffer: {{name: experience_buffer, storage_type: queue}}
explorer:
  runner_per_model: {runners}
  eval_on_startup: false
  over_rollout: {{ratio: {over_rollout}, wait_after_min: 0.05}}
  rollout_model: {{engine_num: {engines}}}
synchronizer:
  sync_interval: 1
  sync_offset: {sync_offset}
  sync_style: {sync_style}
trainer:
  save_interval: 0
  save_hf_checkpoint: last
  grad_clip: {grad_clip}
  ppo_micro_batch_size_per_gpu: 128
  trainer_config: {{old_logprobs_source: {old_logprobs}}}
monitor:
  monitor_type: __main__:StopAtTarget
"""

IDLE_KEYS = ("time/idle_explorer", "time/idle_trainer")
RESULT: common.RunResult | None = None

# --verifier-latency: each answer is checked by a slow outside service (a sandbox, a remote
# judge). Most tasks wait FAST_SECONDS for it, one in SLOW_EVERY (by task id) SLOW_SECONDS.
FAST_SECONDS, SLOW_SECONDS, SLOW_EVERY = 0.1, 1.5, 8


def _math_with_verifier_latency():
    """The math workflow, then a wait for the verifier (in short sleeps, so an abandoned task stops at once)."""
    import zlib

    from trivium.workflows.math_workflow import MathWorkflow

    class MathWithVerifierLatency(MathWorkflow):
        def run(self):
            experiences = super().run()
            slow = zlib.crc32(self.task.task_id.encode()) % SLOW_EVERY == 0
            deadline = time.monotonic() + (SLOW_SECONDS if slow else FAST_SECONDS)
            while time.monotonic() < deadline:
                time.sleep(0.01)
            return experiences

    return MathWithVerifierLatency


MathWithVerifierLatency = None  # built in main(), after the heavy imports
WATCH: common.TargetWatch | None = None


class StopAtTarget:
    """A monitor plugin: records each rollout reward and stops the run at the target."""

    def __init__(self, *, role: str, **_: object):
        self.role = role

    def log(self, metrics: dict[str, float], step: int) -> None:
        from trivium.runtime.stopping import request_stop

        for key in IDLE_KEYS:
            if key in metrics:
                RESULT.idle_seconds[key] = RESULT.idle_seconds.get(key, 0.0) + float(metrics[key])
        if self.role != "explorer" or "rollout/reward_mean" not in metrics:
            return
        if WATCH.record(step, metrics["rollout/reward_mean"]) and not RESULT.stopped_by:
            RESULT.stopped_by = "target"
            request_stop("time-to-target reached")

    def close(self) -> None:
        pass


def main() -> None:
    parser = common.run_arguments()
    parser.add_argument("--mode", choices=["colocate", "both"], required=True)
    parser.add_argument(
        "--placement", choices=["process", "ray"], default="process",
        help="ray: explorer (hosting the engines, on a CPU) and trainer as Ray actors (a local Ray, started and stopped by the run)",
    )
    parser.add_argument("--engines", type=int, default=1, help="rollout engines (explorer.rollout_model.engine_num)")
    parser.add_argument("--keep-run-dir", type=Path, help="write the run here and keep it (default: a temp dir)")
    parser.add_argument(
        "--sync-style", choices=["fixed", "fully_async"], default="fixed",
        help="synchronizer.sync_style (both only); fully_async explores on without waiting, within sync_offset",
    )
    parser.add_argument(
        "--over-rollout", type=float, default=0.0,
        help="explorer.over_rollout.ratio (needs --sync-style fully_async); the step waits 0.05 s after the minimum",
    )
    parser.add_argument(
        "--verifier-latency", action="store_true",
        help=f"every answer waits {FAST_SECONDS} s for a verifier, one task in {SLOW_EVERY} {SLOW_SECONDS} s",
    )
    parser.add_argument(
        "--old-logprobs", choices=["auto", "engine", "decoupled"],
        help="trainer.old_logprobs_source (default: engine in both, auto in colocate)",
    )
    args = parser.parse_args()

    from trivium.config.prepare import prepare
    from trivium.runtime.local_ray import ray_started_for
    from trivium.runtime.startup_collector import collector_paused

    global RESULT, WATCH, MathWithVerifierLatency
    MathWithVerifierLatency = _math_with_verifier_latency()
    label = f"trivium-{args.mode}" + ("-ray" if args.placement == "ray" else "")
    label += f"-{args.sync_style}" if args.sync_style != "fixed" else ""
    label += f"-over{args.over_rollout:g}" if args.over_rollout else ""
    label += "-latency" if args.verifier_latency else ""
    RESULT = result = common.RunResult(system=label, seed=args.seed)
    task = common.TASKS[args.task]
    WATCH = common.TargetWatch(result, PROCESS_START, task.target_reward)

    with tempfile.TemporaryDirectory() as scratch:
        root = str(args.keep_run_dir.resolve()) if args.keep_run_dir else scratch
        Path(root).mkdir(parents=True, exist_ok=True)
        config_path = Path(root) / "config.yaml"
        config_path.write_text(
            CONFIG.format(
                mode=args.mode, placement=args.placement, engines=args.engines, seed=args.seed, root=root,
                model=args.model.resolve(), data=args.data.resolve(),
                max_prompt_tokens=task.max_prompt_tokens, max_response_tokens=task.max_response_tokens,
                max_model_len=task.max_model_len, reward_fn=task.reward_fn, task=task.name,
                temperature=common.TEMPERATURE,
                group_size=common.GROUP_SIZE, lr=args.lr, weight_decay=common.WEIGHT_DECAY,
                clip=common.CLIP_EPSILON, prompts=common.PROMPTS_PER_STEP, max_steps=args.max_steps,
                grad_clip=common.GRAD_CLIP, runners=max(1, common.PROMPTS_PER_STEP // args.engines),
                # both: the explorer runs one step ahead of the trainer, so generation and
                # training overlap; the engine's logprobs are then the behaviour policy's.
                sync_offset=1 if args.mode == "both" else 0,
                sync_style=args.sync_style, over_rollout=args.over_rollout,
                workflow="__main__:MathWithVerifierLatency" if args.verifier_latency else "math",
                old_logprobs=args.old_logprobs or ("engine" if args.mode == "both" else "auto"),
            )
        )
        with collector_paused():  # as `trivium run` starts (trivium/runtime/startup_collector.py)
            (stage,) = prepare(config_path)
            with ray_started_for(stage.config):  # as `trivium run` starts Ray: before the heavy imports
                from trivium.runtime.launcher import launch
            launch(stage.config)
        result.peak_rss_mb = common.peak_rss_mb()
        result.stopped_by = result.stopped_by or "max_steps"
        final = max(Path(root).glob("time_to_target/*/global_step_*/actor"))
        result.heldout_accuracy = common.heldout_accuracy(final, args.data, task)
    result.save(args.out)


if __name__ == "__main__":
    main()
