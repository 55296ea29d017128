"""Run every benchmark in this folder; each writes its table to benchmarks/results/."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    ["engine_vs_generate.py", "--batch-sizes", "8", "32", "128", "--max-new-tokens", "64", "--repeats", "5", "--torch-threads", "1"],
    ["buffer_throughput.py"],
    ["trainer_overhead.py"],
    ["sequence_packing.py"],
    ["time_to_target/run.py"],
    ["time_to_target/run.py", "--task", "countdown", "--systems", "trl", "colocate", "both"],
    ["asynchrony.py"],
    ["contention.py"],
    ["quickstart.py"],
    ["startup.py"],
    ["scaling.py"],
]


def main() -> int:
    failed = []
    began = time.perf_counter()
    for command in BENCHMARKS:
        start = time.perf_counter()
        print(f"== {' '.join(command)}", flush=True)
        code = subprocess.call([sys.executable, str(HERE / command[0]), *command[1:]])
        print(f"== {command[0]}: exit {code} in {time.perf_counter() - start:.0f}s", flush=True)
        if code:
            failed.append(command[0])
    print(f"results: {HERE / 'results'} (all benchmarks: {(time.perf_counter() - began) / 60:.1f} min)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
