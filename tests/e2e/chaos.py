"""The chaos suite's machinery: real runs, killed or faulted, then checked against invariants.

``kill_and_resume`` starts ``trivium run`` as a process, SIGKILLs its whole process group at
seeded random moments, starts it again each time (``continue_from_checkpoint: true``), and
lets the last start finish. ``lineage_problems`` then checks the run's audit trail
(``log/trained_samples.jsonl``): every trainer step trained once, full batches, no sample
twice, every explorer step's samples trained, no sample from a policy newer than the step.

``huge_numbers`` finds what a run's printed summary should never show after a bad reward.

``Report`` collects one row per scenario and writes the markdown table that
``benchmarks/results/chaos.md`` holds (``make chaos``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trivium.runtime.trained_samples import duplicated_samples, trail_path, trained_lineage
from trivium.trainer import checkpoint as ckpt


def run_command(config_path: str | Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trivium.cli.main", "run", "--config", str(config_path), *extra]


@dataclass
class Kill:
    moment: str  # when, relative to the start's progress
    trained_steps: int  # steps in the audit trail when killed (including ones lost with the kill)
    checkpoint: int | None  # the newest checkpoint at that moment


@dataclass
class ChainResult:
    kills: list[Kill] = field(default_factory=list)
    final_returncode: int = -1
    final_output: str = ""
    resumed_from: int | None = None  # checkpoint the last start resumed from
    final_steps: list[int] = field(default_factory=list)  # steps the last start trained
    seconds: float = 0.0


def kill_and_resume(command: list[str], run_dir: Path, *, kills: int, rng: random.Random, total_steps: int,
                    timeout: float = 300) -> ChainResult:
    """Kill the run ``kills`` times, then let one last start finish.

    Each kill lands at a seeded random moment measured in the start's own progress, so the
    points spread the same way on a fast or a loaded machine: during start-up (0.5-6 s after
    launch), or 0-0.5 s after the start's 1st to 4th trained step (mid-step, mid-checkpoint,
    mid-sync, between steps), never its last step, so that the kill lands before the run ends.
    """
    result = ChainResult()
    started = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / "chaos_output.txt", "ab") as log:
        for _ in range(kills):
            lines_before = len(_trail_lines(run_dir))
            process = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
            if rng.random() < 0.25:
                moment = f"{rng.uniform(0.5, 6.0):.1f}s after launch"
                finished = _wait(process, float(moment.split("s")[0]))
            else:
                left = total_steps - (ckpt.latest_checkpoint(run_dir) or 0)
                steps, jitter = rng.randint(1, max(1, min(4, left - 3))), rng.uniform(0.0, 0.5)
                moment = f"{jitter:.1f}s after its step {steps}"
                def trained_enough(first=lines_before, wanted=steps) -> bool:
                    return len(_trail_lines(run_dir)) - first >= wanted

                finished = _wait(process, timeout, until=trained_enough)
                finished = finished or _wait(process, jitter)
            if finished:
                break  # the run ended before the kill: nothing left to kill
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            result.kills.append(Kill(moment, len(trained_lineage(run_dir)), ckpt.latest_checkpoint(run_dir)))
        result.resumed_from = ckpt.latest_checkpoint(run_dir)
        lines_before = len(_trail_lines(run_dir))
        final = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)
    result.final_returncode = final.returncode
    result.final_output = (final.stdout + final.stderr)[-3000:]
    result.final_steps = [json.loads(line)["step"] for line in _trail_lines(run_dir)[lines_before:]]
    result.seconds = time.monotonic() - started
    return result


def _wait(process: subprocess.Popen, seconds: float, until=None) -> bool:
    """Wait ``seconds`` (or until ``until()`` holds); True when the process ended meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return True
        if until is not None and until():
            return False
        time.sleep(0.05)
    return process.poll() is not None


def _trail_lines(run_dir: Path) -> list[str]:
    path = trail_path(run_dir)
    if not path.exists():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.endswith("}")]


def lineage_problems(run_dir: Path, *, total_steps: int, samples_per_step: int) -> list[str]:
    """What is wrong with what the run finally trained (empty: nothing)."""
    lineage = trained_lineage(run_dir)
    problems = []
    if list(lineage) != list(range(1, total_steps + 1)):
        problems.append(f"trained steps {list(lineage)}, expected 1..{total_steps}")
    short = {step: len(samples) for step, samples in lineage.items() if len(samples) != samples_per_step}
    if short:
        problems.append(f"steps with a batch of another size than {samples_per_step}: {short}")
    duplicates = duplicated_samples(lineage)
    if duplicates:
        problems.append(f"{len(duplicates)} samples trained twice, e.g. {duplicates[:3]}")
    per_explore_step = Counter(explore_step for samples in lineage.values() for _, _, explore_step, _ in samples)
    uneven = {s: n for s, n in per_explore_step.items() if n != samples_per_step}
    if sorted(per_explore_step) != list(range(1, total_steps + 1)) or uneven:
        problems.append(f"explorer steps trained unevenly or missing: {dict(sorted(per_explore_step.items()))}")
    newer = [step for step, samples in lineage.items() if any(version >= step for *_, version in samples)]
    if newer:
        problems.append(f"steps {newer} trained samples of a policy as new as their own result")
    return problems


# A number as printed (1.5, -3e+07, 1,234.5), or the words a non-finite float prints as.
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?|\b(?:-?inf|nan|infinity)\b", re.IGNORECASE)


def huge_numbers(text: str, *, limit: float = 1e6) -> list[str]:
    """Numbers in ``text`` beyond ±``limit``, and any inf or nan; words holding a path are skipped."""
    words = " ".join(word for word in text.split() if "/" not in word)
    found = []
    for match in _NUMBER.finditer(words):
        number = match.group().replace(",", "")
        if number.lower() in ("nan", "inf", "-inf", "infinity", "-infinity") or abs(float(number)) > limit:
            found.append(match.group())
    return found


@dataclass
class Row:
    scenario: str
    injected: str
    passed: bool
    detail: str


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, scenario: str, injected: str, passed: bool, detail: str) -> None:
        self.rows.append(Row(scenario, injected, passed, detail))

    def markdown(self, *, header: str) -> str:
        lines = [header, "", "| scenario | injected | result | what was checked / seen |", "|---|---|---|---|"]
        for row in self.rows:
            lines.append(f"| {row.scenario} | {row.injected} | {'pass' if row.passed else '**FAIL**'} | {row.detail} |")
        kills = sum(int(row.injected.split()[0]) for row in self.rows if row.injected.endswith("SIGKILLs"))
        lines += ["", (f"{len(self.rows)} scenarios, {kills} SIGKILLs, "
                       f"{sum(not row.passed for row in self.rows)} failed.")]
        return "\n".join(lines) + "\n"
