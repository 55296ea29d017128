"""The GPU paths of trivium, proven on one NVIDIA GPU in a few minutes: `make gpu-check`.

Each check is a short `trivium run` (a subprocess, as a user starts it) on a tiny model or the
cut-depth Qwen2.5-0.5B shape, with one GPU. A check passes when the run exits 0, wrote the
metrics its path must produce, and, where weights were synchronized, the logprob self-check
found the engine serving what the trainer sent. The table gives each check's result, time
and peak GPU memory (sampled from nvidia-smi); the exit code is 1 if any check failed.

    python tools/gpu_check.py                 # all checks (needs a GPU, CUDA torch and vLLM)
    python tools/gpu_check.py --list          # the checks and what each proves
    python tools/gpu_check.py --plan-only     # build inputs and `trivium plan` every config (no GPU)
    python tools/gpu_check.py --only bf16,lora_vllm

`docs/gpu.md` says what each check proves and what it does not.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SELF_CHECK_TOLERANCE = 1e-2  # bf16 engines and trainers differ by more than float32 ones


@dataclass(frozen=True)
class Check:
    name: str
    proves: str
    overrides: dict = field(default_factory=dict)
    model: str = "tiny"  # "tiny" or "qwen"
    gpus: int = 1  # GPUs the check needs
    expects: tuple[str, ...] = ("rollout/reward_mean", "actor/pg_loss")


CHECKS = (
    Check(
        "vllm_rollouts",
        "vLLM generates the rollouts on the GPU (token ids, logprobs), sleeps while the trainer steps "
        "(colocate) and loads each new version in memory; the self-check compares its logprobs with the trainer's",
        {"explorer.rollout_model.engine_type": "vllm"},
    ),
    Check(
        "quickstart_grpo",
        "the quickstart recipe's GRPO stage on the GPU: hf engine, colocate, memory sync, evaluation",
        {"explorer.rollout_model.engine_type": "hf", "buffer.total_steps": 8, "explorer.eval_interval": 4},
        expects=("rollout/reward_mean", "actor/pg_loss", "eval/arithmetic_test/accuracy"),
    ),
    Check(
        "fsdp2_one_rank",
        "the FSDP2 trainer (one rank, CUDA device mesh) trains and hands its full weights to the engine",
        {"trainer.trainer_strategy": "fsdp2", "trainer.data_parallel_size": 1},
    ),
    Check(
        "lora_vllm",
        "LoRA (peft) on the GPU with vLLM rollouts: the adapter is merged into the weights vLLM loads",
        {"explorer.rollout_model.engine_type": "vllm", "model.lora_configs": [{"lora_rank": 8, "lora_alpha": 16}],
         "algorithm.optimizer.lr": 1e-3},
    ),
    Check(
        "bf16",
        "bfloat16 weights in the trainer (float32 master weights in the optimizer) and the engine",
        {"model.dtype": "bfloat16", "explorer.rollout_model.dtype": "bfloat16",
         "explorer.rollout_model.engine_type": "vllm"},
    ),
    Check(
        "nccl_sync",
        "`both` on Ray with the engine and the trainer on GPUs of their own: weights broadcast over NCCL, "
        "the self-check after each sync (needs 2 GPUs; reported as skipped on one)",
        {"mode": "both", "cluster.gpu_per_node": 2, "cluster.placement": "ray",
         "explorer.rollout_model.engine_type": "vllm", "synchronizer.sync_method": "nccl"},
        gpus=2,
    ),
    Check(
        "qwen_shape",
        "the Qwen2.5-0.5B architecture (cut to 4 layers, 151,936-token vocabulary, real chat format) for 5 "
        "steps with vLLM: real shapes load in both, sync and agree",
        {"explorer.rollout_model.engine_type": "vllm", "buffer.total_steps": 5, "buffer.batch_size": 4},
        model="qwen",
    ),
)


def base_config(work: Path, model: str, data: Path) -> dict:
    """The quickstart's task, shortened: 3 GRPO steps of 8 prompts × 4 answers on one GPU."""
    taskset = {
        "name": "arithmetic_train", "storage_type": "file", "path": str(data), "split": "train",
        "format": {"prompt_key": "question", "response_key": "answer", "system_prompt": ""},
    }
    return {
        "project": "gpu_check", "name": "check", "mode": "colocate", "seed": 0,
        "checkpoint_root_dir": str(work / "runs"),
        "model": {"model_path": model, "max_prompt_tokens": 32, "max_response_tokens": 10, "max_model_len": 48},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-4}, "kl_loss_fn": "none"},
        "buffer": {
            "batch_size": 8, "total_steps": 3,
            "explorer_input": {
                "default_workflow_type": "math", "default_reward_fn_type": "math_reward", "taskset": taskset,
                "eval_tasksets": [{**taskset, "name": "arithmetic_test", "split": "test",
                                   "rollout_args": {"temperature": 0.0}}],
            },
        },
        "explorer": {"rollout_model": {"gpu_memory_utilization": 0.3, "enforce_eager": True}},
        "synchronizer": {"sync_interval": 1, "self_check_interval": 1},
        "trainer": {"save_interval": 0, "save_hf_checkpoint": "never"},
    }


def with_overrides(config: dict, overrides: dict) -> dict:
    config = copy.deepcopy(config)
    for dotted, value in overrides.items():
        node = config
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return config


def trivium(*args: str) -> list[str]:
    return [sys.executable, "-m", "trivium.cli.main", *args]


def build_inputs(work: Path) -> dict[str, Path]:
    """The tiny model, the cut-depth Qwen2.5-0.5B shape and the arithmetic data, built locally once."""
    paths = {"tiny": work / "models" / "tiny", "qwen": work / "models" / "qwen2.5-0.5b", "data": work / "data"}
    builds = [
        (paths["tiny"] / "config.json", ["init", "model", "--preset", "tiny", "--out", str(paths["tiny"])]),
        (paths["qwen"] / "config.json",
         ["init", "model", "--preset", "qwen2.5-0.5b", "--layers", "4", "--out", str(paths["qwen"])]),
        (paths["data"] / "train.jsonl",
         ["init", "data", "--task", "arithmetic", "--out", str(paths["data"]), "--num-train", "400", "--num-test", "40"]),
    ]
    for done, args in builds:
        if not done.exists():
            subprocess.run(trivium(*args), check=True, capture_output=True, text=True)
    return paths


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in result.stdout.splitlines())


class PeakGpuMemory:
    """The most GPU memory in use (MiB, all GPUs summed) while the block runs, from nvidia-smi."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            result = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, check=False,
            )
            used = sum(int(value) for value in result.stdout.split() if value.strip().isdigit())
            self.peak = max(self.peak, used)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakGpuMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Result:
    name: str
    status: str  # pass | FAIL | skipped
    seconds: float = 0.0
    peak_mib: int = 0
    detail: str = ""


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def judge(check: Check, returncode: int, output: str, records: list[dict]) -> str:
    """Why the check failed; empty when it passed."""
    if returncode != 0:
        return f"exit code {returncode}: {output.strip().splitlines()[-1] if output.strip() else 'no output'}"
    missing = [key for key in check.expects if not any(key in record for record in records)]
    if missing:
        return f"no {', '.join(missing)} in metrics.jsonl"
    diffs = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    if not diffs:
        return "the logprob self-check never ran"
    if max(diffs) > SELF_CHECK_TOLERANCE:
        return f"the engine disagrees with the trainer after a sync: max logprob diff {max(diffs):.2e}"
    return ""


def run_check(check: Check, config: dict, work: Path, gpus: int, timeout: float) -> Result:
    if gpus < check.gpus:
        return Result(check.name, "skipped", detail=f"needs {check.gpus} GPUs, this machine has {gpus}")
    path = work / "configs" / f"{check.name}.yaml"
    started = time.monotonic()
    with PeakGpuMemory() as memory:
        try:
            result = subprocess.run(
                trivium("run", "--config", str(path)), capture_output=True, text=True, timeout=timeout, check=False
            )
            returncode, output = result.returncode, result.stdout + result.stderr
        except subprocess.TimeoutExpired:
            returncode, output = -1, f"did not finish within {timeout:.0f} s"
    run_dir = Path(config["checkpoint_root_dir"]) / config["project"] / config["name"]
    (work / "logs").mkdir(exist_ok=True)
    (work / "logs" / f"{check.name}.log").write_text(output)
    failure = judge(check, returncode, output, read_metrics(run_dir))
    return Result(check.name, "FAIL" if failure else "pass", time.monotonic() - started, memory.peak, failure)


def plan_check(config_path: Path) -> Result:
    started = time.monotonic()
    result = subprocess.run(trivium("plan", "--config", str(config_path)), capture_output=True, text=True, check=False)
    detail = "" if result.returncode == 0 else (result.stderr.strip().splitlines() or ["?"])[-1]
    return Result(config_path.stem, "FAIL" if detail else "pass", time.monotonic() - started, 0, detail)


def table(results: list[Result]) -> str:
    lines = ["| check | result | time (s) | peak GPU memory (MiB) | detail |", "|---|---|---:|---:|---|"]
    lines += [f"| {r.name} | {r.status} | {r.seconds:.1f} | {r.peak_mib or ''} | {r.detail} |" for r in results]
    return "\n".join(lines)


def write_configs(work: Path, checks: list[Check], paths: dict[str, Path]) -> dict[str, dict]:
    configs = {}
    (work / "configs").mkdir(parents=True, exist_ok=True)
    for check in checks:
        config = with_overrides(base_config(work, str(paths[check.model]), paths["data"]), check.overrides)
        config["name"] = check.name
        (work / "configs" / f"{check.name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        configs[check.name] = config
    return configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the checks and what each proves")
    parser.add_argument("--plan-only", action="store_true", help="`trivium plan` every check's config; no GPU needed")
    parser.add_argument("--only", help="comma-separated check names")
    parser.add_argument("--work-dir", default=str(REPO / "gpu_check"), help="models, data, configs, runs, logs")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per check")
    args = parser.parse_args(argv)

    checks = list(CHECKS)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {check.name for check in CHECKS}
        if unknown:
            parser.error(f"unknown check(s) {', '.join(sorted(unknown))}; choose from {', '.join(c.name for c in CHECKS)}")
        checks = [check for check in checks if check.name in wanted]
    if args.list:
        for check in checks:
            print(f"{check.name}: {check.proves}")
        return 0
    work = Path(args.work_dir).resolve()
    paths = build_inputs(work)
    configs = write_configs(work, checks, paths)
    runner: Callable[[Check], Result]
    if args.plan_only:
        runner = lambda check: plan_check(work / "configs" / f"{check.name}.yaml")  # noqa: E731
    else:
        gpus = gpu_count()
        if gpus == 0:
            print("no NVIDIA GPU found (nvidia-smi -L); `--plan-only` checks the configs without one", file=sys.stderr)
            return 1
        os.environ.setdefault("OMP_NUM_THREADS", "4")
        runner = lambda check: run_check(check, configs[check.name], work, gpus, args.timeout)  # noqa: E731
    results = []
    for check in checks:
        print(f"running {check.name} ...", flush=True)
        results.append(runner(check))
    print(table(results))
    return 1 if any(result.status == "FAIL" for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
