"""Training tokens/s with packed micro-batches against padded ones, on a batch of mixed lengths.

A batch of 64 sequences as multi-turn and agent runs produce them: prompts of 10-60 tokens,
responses of 4-400 (a long tail: a quarter of them over 200), each its own prompt (no group
shares one, so the shared-prompt pass has nothing to share). Every way of cutting the batch
runs the same update, ``Trainer.update_policy`` (forward, backward, gradient clipping, the
AdamW step), on the same weights:

- ``padded, by count``: micro-batches of 8 rows in arrival order (``use_dynamic_bsz: false``),
  each padded to its longest row;
- ``padded, token budget``: rows sorted by length and cut at a padded-token budget
  (``use_dynamic_bsz: true``, the default);
- ``packed, token budget``: the same budget counted in real tokens, each micro-batch one row
  without padding (``use_remove_padding: true``), attention kept within each sequence by
  ``trivium_varlen_sdpa``;
- ``packed, dense mask``: the packed rows under transformers' own ``sdpa``, which reads the
  packed row as one sequence under a (T, T) block mask; shown to say why the varlen attention
  exists on machines without FlashAttention.

Ways run back to back in a rotating order, repeated; the table reports median tokens/s (real
tokens only) and the median of the paired ratios against ``padded, token budget``.

    python benchmarks/sequence_packing.py [--presets tiny small] [--budget 4096] [--repeats 5]

Writes benchmarks/results/sequence_packing.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trivium.core.batch import ExperienceBatch  # noqa: E402
from trivium.core.experience import Experience  # noqa: E402
from trivium.models.tiny import build_tiny_model  # noqa: E402
from trivium.trainer.settings import LossSettings, TrainerSettings  # noqa: E402
from trivium.trainer.trainer import Trainer  # noqa: E402

from machine import describe  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS_FILE = Path(__file__).parent / "results" / "sequence_packing.md"
BASELINE = "padded, token budget"
WAYS = {
    # name: (use_dynamic_bsz, pack_sequences, attention of the packed forward)
    "padded, by count": (False, False, None),
    BASELINE: (True, False, None),
    "packed, token budget": (True, True, "trivium_varlen_sdpa"),
    "packed, dense mask": (True, True, "sdpa"),
}


def mixed_batch(rows: int, vocab: int, seed: int) -> list[Experience]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for row in range(rows):
        prompt = int(torch.randint(10, 61, (1,), generator=generator))
        # A long tail: three in four responses under 200 tokens, the rest up to 400.
        top = 401 if row % 4 == 0 else 200
        response = int(torch.randint(4, top, (1,), generator=generator))
        out.append(Experience(
            tokens=torch.randint(3, vocab, (prompt + response,), generator=generator),
            prompt_length=prompt,
            logprobs=-torch.rand(response, generator=generator),
            advantages=torch.full((response,), float(torch.randn(1, generator=generator))),
            reward=0.0,
            group_id=f"task{row}",
        ))
    return out


def trainer_for(way: str, model_dir: str, run_dir: str, budget: int) -> Trainer:
    dynamic, packed, attention = WAYS[way]
    settings = TrainerSettings(
        model_path=model_dir, lr=1e-6, use_dynamic_bsz=dynamic, micro_batch_size=8,
        max_token_len_per_gpu=budget, pack_sequences=packed, share_prompt_forward=True,
        loss=LossSettings(policy_loss_fn="ppo", advantage_fn="grpo", loss_agg_mode="token-mean"),
    )
    trainer = Trainer(settings, run_dir=run_dir)
    if attention == "sdpa":
        trainer.actor.set_attn_implementation("sdpa")
    return trainer


def update_seconds(trainer: Trainer, experiences: list[Experience]) -> float:
    batch = ExperienceBatch.from_experiences(experiences)
    start = time.perf_counter()
    trainer.update_policy(batch, trainer.plan(batch), None, None)
    return time.perf_counter() - start


def run_preset(preset: str, budget: int, repeats: int, rows: int, work: Path) -> dict:
    model_dir = str(build_tiny_model(work / preset, preset=preset, seed=0))
    trainers = {way: trainer_for(way, model_dir, str(work / f"run-{preset}-{i}"), budget) for i, way in enumerate(WAYS)}
    vocab = trainers[BASELINE].actor.config.vocab_size
    experiences = mixed_batch(rows, vocab, seed=0)
    batch = ExperienceBatch.from_experiences(experiences)
    real, padded = batch.num_tokens, batch.input_ids.numel()
    for trainer in trainers.values():  # warm-up: allocator, thread pools
        update_seconds(trainer, experiences)
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    order = list(WAYS)
    for repeat in range(repeats):
        for way in order[repeat % len(order):] + order[: repeat % len(order)]:
            seconds[way].append(update_seconds(trainers[way], experiences))
    micro_batches = {way: len(trainers[way].plan(batch)) for way in WAYS}
    return {
        "preset": preset,
        "params": sum(p.numel() for p in trainers[BASELINE].actor.parameters()),
        "real_tokens": real,
        "padded_tokens": padded,
        "micro_batches": micro_batches,
        "tokens_per_s": {way: real / statistics.median(s) for way, s in seconds.items()},
        "ratio": {
            way: statistics.median(b / s for b, s in zip(seconds[BASELINE], seconds[way])) for way in WAYS
        },
    }


def render(results: list[dict], budget: int, rows: int, repeats: int) -> str:
    lines = [
        "# Sequence packing: training tokens/s, packed against padded",
        "",
        describe(torch=torch.__version__),
        "",
        f"`python benchmarks/sequence_packing.py --budget {budget} --repeats {repeats}`: {rows} sequences "
        "(prompts 10-60 tokens, responses 4-400), one `update_policy` per measurement (forward, backward, "
        f"AdamW), a token budget of {budget} per micro-batch. Median real tokens/s; the ratio is the median "
        f"of paired speed-ups against `{BASELINE}`.",
        "",
        "| model | way | micro-batches | tokens/s | vs padded, token budget |",
        "| --- | --- | --- | --- | --- |",
    ]
    for result in results:
        label = f"{result['preset']} ({result['params'] / 1e6:.1f}M)"
        for way in WAYS:
            lines.append(
                f"| {label} | {way} | {result['micro_batches'][way]} | {result['tokens_per_s'][way]:,.0f} "
                f"| {result['ratio'][way]:.2f}x |"
            )
        share = result["real_tokens"] / result["padded_tokens"]
        lines.append(f"| {label} | (real tokens: {result['real_tokens']}, {share:.0%} of the padded batch) | | | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--budget", type=int, default=4096, help="max_token_len_per_gpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS_FILE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        results = [run_preset(preset, args.budget, args.repeats, args.rows, Path(work)) for preset in args.presets]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(results, args.budget, args.rows, args.repeats))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
