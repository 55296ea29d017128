"""Rollout tokens/s of trivium's two local engines, ``vllm`` and ``hf``, side by side.

Both engines go through trivium's own adapters (``create_engine``), as a run uses them: the
same prompts, temperature 1.0, exactly ``--max-new-tokens`` tokens per sequence (stop ids
suppressed by ``min_tokens``), sampled-token logprobs returned. For each model (the tiny
and small presets) and batch size, the two engines alternate for ``--repeats`` rounds; the
table reports medians and the ratio of each round. Needs vLLM in this interpreter:

    make vllm-env && .venv-vllm/bin/python benchmarks/rollout_engines.py
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from machine import cpu_model, load_average

from trivium.models.engine import SamplingParams, create_engine
from trivium.models.tiny import build_tiny_model

RESULTS_FILE = Path(__file__).parent / "results" / "rollout_engines.md"


def make_prompts(batch_size: int, vocab_size: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 33, (batch_size,), generator=generator)
    return [torch.randint(5, vocab_size, (int(n),), generator=generator).tolist() for n in lengths]


def tokens_per_second(engine, prompts, max_new_tokens: int) -> float:
    params = SamplingParams(temperature=1.0, max_tokens=max_new_tokens, min_tokens=max_new_tokens)
    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - start
    produced = sum(len(samples[0].token_ids) for samples in outputs)
    assert produced == len(prompts) * max_new_tokens, produced
    assert all(len(samples[0].logprobs) == max_new_tokens for samples in outputs)
    return produced / elapsed


def measure_model(preset: str, args) -> tuple[list[tuple], float, dict]:
    model_path = str(build_tiny_model(Path(tempfile.mkdtemp()) / preset, preset=preset, seed=0))
    max_model_len = 32 + args.max_new_tokens
    hf = create_engine("hf", model_path=model_path, dtype="float32", seed=0, max_model_len=max_model_len)
    start = time.perf_counter()
    vllm = create_engine(
        "vllm",
        model_path=model_path,
        dtype="float32",
        seed=0,
        max_model_len=max_model_len,
        enforce_eager=args.enforce_eager,
    )
    startup = time.perf_counter() - start
    n_params = sum(p.numel() for p in {id(p): p for p in hf.model.parameters()}.values())
    info = {"params": n_params, "vocab": hf.vocab_size, "decoder": type(hf.decoder).__name__}
    rows = []
    for batch_size in args.batch_sizes:
        prompts = make_prompts(batch_size, hf.vocab_size, seed=batch_size)
        tokens_per_second(hf, prompts, 4)  # warm-up both paths
        tokens_per_second(vllm, prompts, 4)
        vllm_rates, hf_rates = [], []
        for _ in range(args.repeats):
            vllm_rates.append(tokens_per_second(vllm, prompts, args.max_new_tokens))
            hf_rates.append(tokens_per_second(hf, prompts, args.max_new_tokens))
        ratios = [v / h for v, h in zip(vllm_rates, hf_rates)]
        rows.append(
            (
                batch_size,
                statistics.median(vllm_rates),
                statistics.median(hf_rates),
                statistics.median(ratios),
                min(ratios),
                max(ratios),
            )
        )
        print(
            f"{preset} batch {batch_size}: vllm {rows[-1][1]:,.0f} tok/s, hf {rows[-1][2]:,.0f} tok/s, ratio {rows[-1][3]:.2f}x",
            flush=True,
        )
    vllm.close()
    return rows, startup, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--enforce-eager", action="store_true", help="vLLM without torch.compile (starts faster)"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads of the hf engine; vLLM's CPU worker runs one thread per core it binds (one here)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_FILE)
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; these models need little
    import vllm

    load_before = load_average()
    sections = []
    for preset in args.presets:
        rows, startup, info = measure_model(preset, args)
        sections += [
            f"## `{preset}` preset ({info['params'] / 1e6:.2f}M parameters, vocab {info['vocab']})",
            "",
            f"vLLM engine start-up: {startup:.0f} s. hf decoder: `{info['decoder']}`.",
            "",
            "| batch | vllm engine tok/s (median) | hf engine tok/s (median) | vllm / hf (median) | range |",
            "| ---: | ---: | ---: | ---: | ---: |",
            *(
                f"| {b} | {v:,.0f} | {h:,.0f} | {r:.2f}x | {lo:.2f}-{hi:.2f}x |"
                for b, v, h, r, lo, hi in rows
            ),
            "",
        ]
    report = [
        "# Rollout engines: vllm vs hf",
        "",
        (
            "trivium's `vllm` engine (vLLM's offline `LLM` on the CPU build, through trivium's adapter) and its "
            "`hf` engine on the same prompts: float32, temperature 1.0, top-p 1.0, no top-k, exactly "
            f"{args.max_new_tokens} new tokens per sequence, prompts of 8-32 tokens, sampled-token logprobs "
            f"returned. {args.repeats} alternating rounds per batch size."
        ),
        "",
        (
            f"Machine: {cpu_model()}, {os.cpu_count()} cores (shared with other work), torch {torch.__version__}, "
            f"vLLM {vllm.__version__}, Python {platform.python_version()}. vLLM binds its worker to its own "
            f"cores; the hf engine used {args.torch_threads} torch thread(s)."
        ),
        f"Load average (1, 5, 15 min) before the run: {load_before}; after: {load_average()}.",
        "",
        *sections,
        f"Command: `.venv-vllm/bin/python benchmarks/rollout_engines.py --batch-sizes {' '.join(map(str, args.batch_sizes))} "
        f"--max-new-tokens {args.max_new_tokens} --repeats {args.repeats}"
        + f" --torch-threads {args.torch_threads}"
        + (" --enforce-eager`" if args.enforce_eager else "`"),
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(report))
    print(f"\nwrote {args.output}")


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which re-imports this file
    main()
