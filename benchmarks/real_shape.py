"""Memory and speed of one GRPO step at a real model's shape: the Qwen2.5-0.5B architecture at
full depth (random weights, 151,936-token vocabulary), trivium beside TRL's ``GRPOTrainer``.

The step: 4 prompts of about 64 tokens, 2 samples each, 64 response tokens each, sampled on
the CPU by each system's own generation (trivium's ``hf`` engine, TRL's ``generate``), then
one GRPO update (float32, AdamW, no KL, no gradient checkpointing for either) and, for
trivium, the weights handed back to its engine (what ``colocate`` does). Each system runs in
a process of its own (the scaling sweep's workers, ``scaling/trivium_point.py`` and
``scaling/trl_point.py``): one warm-up step, then two timed steps; peak RSS is the process's
whole life. trivium runs twice: with the head chunked (the default at this vocabulary) and
with ``trainer.logit_chunk_tokens: 0`` (whole logits), to show what chunking saves.

    python benchmarks/real_shape.py [--threads 2] [--systems trivium trivium-whole-head trl]

Writes benchmarks/results/real_shape.md and real_shape.json. A step takes minutes on 2 cores:
the whole run about 15-25 minutes. Time it on a quiet machine (the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "scaling"))

import points
from machine import describe

RESULTS = HERE / "results"
POINT = points.Point(model="qwen2.5-0.5b", response_tokens=64, group_size=2, prompts_per_step=4)
PROMPT_WORDS = 50  # with the chat template, about 64 prompt tokens
SYSTEMS = {
    "trivium": (HERE / "scaling" / "trivium_point.py", []),
    "trivium-whole-head": (HERE / "scaling" / "trivium_point.py", ["--logit-chunk-tokens", "0"]),
    "trl": (HERE / "scaling" / "trl_point.py", []),
}


def run(system: str, threads: int, work: Path) -> dict:
    script, extra = SYSTEMS[system]
    out = work / f"{system}.json"
    command = [sys.executable, str(script), *POINT.to_args(), "--prompt-words", str(PROMPT_WORDS),
               "--warmup-steps", "1", "--timed-steps", "2", "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        return {"system": system, "error": result.stderr[-2000:], "load": load_before}
    measured = json.loads(out.read_text())
    step = sum(measured["step_seconds"]) / len(measured["step_seconds"])
    return {
        "system": system, "peak_rss_mb": measured["peak_rss_mb"], "step_seconds": step,
        "train_tokens_per_s": measured["train_tokens"] / step, "params": measured["params"],
        "process_seconds": wall, "load": load_before, "pieces": measured["pieces"],
    }


def library_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("torch", "transformers", "trl"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def report(rows: list[dict], threads: int) -> str:
    trl = next((r for r in rows if r["system"] == "trl" and "error" not in r), None)
    lines = [
        "# One GRPO step at the Qwen2.5-0.5B shape: trivium vs TRL",
        "",
        f"{describe()}; {threads} torch thread(s) per system; `python benchmarks/real_shape.py`; "
        f"{library_versions()}.",
        "4 prompts × 2 samples, ~64-token prompts, 64-token responses; float32, AdamW, no KL, no",
        "gradient checkpointing; each system in its own process (1 warm-up step, mean of 2 timed).",
        "",
        "| system | peak RSS (MB) | vs TRL | step (s) | vs TRL | train tokens/s | load avg at start |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['system']} | failed: {row['error'].splitlines()[-1] if row['error'] else '?'} |||||{row['load']:.2f} |")
            continue
        memory = f"{row['peak_rss_mb'] / trl['peak_rss_mb']:.2f}x" if trl else ""
        speed = f"{row['step_seconds'] / trl['step_seconds']:.2f}x" if trl else ""
        lines.append(
            f"| {row['system']} | {row['peak_rss_mb']:,.0f} | {memory} | {row['step_seconds']:.1f} | {speed} | "
            f"{row['train_tokens_per_s']:.1f} | {row['load']:.2f} |"
        )
    lines += ["", "Where each trivium step's time goes (seconds per step):", ""]
    for row in rows:
        if row["system"].startswith("trivium") and "pieces" in row:
            pieces = ", ".join(f"{k} {v:.2f}" for k, v in sorted(row["pieces"].items()) if v > 0.005)
            lines.append(f"- {row['system']}: {pieces}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    args = parser.parse_args()
    work = points.WORK / "real_shape"
    work.mkdir(parents=True, exist_ok=True)
    points.model_dir(POINT.model)  # built once, before any timing
    rows = []
    for system in args.systems:
        print(f"running {system} ...", flush=True)
        rows.append(run(system, args.threads, work))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "pieces"}), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "real_shape.json").write_text(json.dumps(rows, indent=1))
    text = report(rows, args.threads)
    (RESULTS / "real_shape.md").write_text(text)
    print(text)
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
