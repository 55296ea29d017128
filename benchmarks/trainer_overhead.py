"""Steps per second of ``Trainer.train_step`` versus a bare PyTorch loop doing the same work.

Both paths train the same architecture, loaded from the same checkpoint, on the same random
GRPO-style batches: prompts of 16-24 tokens, responses of 6-14 tokens, advantages already
filled (constant per sequence, normalised in groups of 8), no KL term, no critic, one optimizer
step per batch and the whole batch as one micro-batch. The bare loop pads the batch, runs the
forward, gathers the response log-probabilities, applies the clipped-ratio loss (dual clip at
3, token-mean), backpropagates, clips the gradient norm and steps AdamW with the same settings
(``foreach=True``). Its one extra is reading the loss as a float, as any training loop logs it.

Every batch is run by both paths back to back (which one goes first alternates between
repeats), so that other processes on the shared cores slow both alike; the table reports
median steps/s and the median of the paired ratios trivium time / bare time.
A second part splits trivium's step into pieces and times each one, to show where any
overhead goes.

    python benchmarks/trainer_overhead.py [--preset tiny small] [--batch 128] [--steps 20] [--repeats 5]

Writes benchmarks/results/trainer_overhead.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import AutoModelForCausalLM  # noqa: E402

from trivium.algorithm.policy_losses import POLICY_LOSS_FNS  # noqa: E402
from trivium.core.batch import ExperienceBatch  # noqa: E402
from trivium.core.experience import Experience  # noqa: E402
from trivium.models.tiny import build_tiny_model  # noqa: E402
from trivium.trainer.forward import response_logprobs  # noqa: E402
from trivium.trainer.micro_batch import loss_scale  # noqa: E402
from trivium.trainer.settings import LossSettings, TrainerSettings  # noqa: E402
from trivium.trainer.trainer import Trainer  # noqa: E402

from machine import cpu_model, load_average  # noqa: E402  (benchmarks/ is on sys.path)

RESULTS_FILE = Path(__file__).parent / "results" / "trainer_overhead.md"
GROUP_SIZE = 8
LR, BETAS, WEIGHT_DECAY, GRAD_CLIP = 1e-6, (0.9, 0.999), 0.01, 1.0
CLIP_LOW = CLIP_HIGH = 0.2
DUAL_CLIP = 3.0


# ---------------------------------------------------------------------------- data
def make_batches(count: int, batch_size: int, vocab_size: int, seed: int) -> list[list[Experience]]:
    """``count`` batches of GRPO-style experiences with group-normalised advantages."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for b in range(count):
        experiences = []
        for i in range(batch_size):
            prompt_len = int(torch.randint(16, 25, (1,), generator=generator))
            response_len = int(torch.randint(6, 15, (1,), generator=generator))
            tokens = torch.randint(3, vocab_size, (prompt_len + response_len,), generator=generator)
            experiences.append(
                Experience(
                    tokens=tokens,
                    prompt_length=prompt_len,
                    logprobs=-torch.rand(response_len, generator=generator),
                    reward=float(torch.rand(1, generator=generator) > 0.5),
                    group_id=f"b{b}g{i // GROUP_SIZE}",
                )
            )
        for start in range(0, batch_size, GROUP_SIZE):
            group = experiences[start : start + GROUP_SIZE]
            rewards = torch.tensor([e.reward for e in group])
            # A = (r - mean(group)) / (std(group) + eps), the same value on every response token
            scores = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            for exp, score in zip(group, scores.tolist()):
                exp.advantages = torch.full((exp.response_length,), score)
        batches.append(experiences)
    return batches


# ---------------------------------------------------------------------------- the bare loop
class BareLoop:
    """The same update written as a plain PyTorch loop, with nothing but the math."""

    def __init__(self, model_path: str, pad_token_id: int):
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.config.use_cache = False
        self.model.train()
        self.pad_token_id = pad_token_id
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY, foreach=True
        )

    def pad(self, experiences: list[Experience]):
        """Left-pad prompts to P, right-pad responses to R."""
        P = max(e.prompt_length for e in experiences)
        R = max(e.response_length for e in experiences)
        B = len(experiences)
        input_ids = torch.full((B, P + R), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((B, P + R), dtype=torch.long)
        advantages = torch.zeros((B, R))
        for i, exp in enumerate(experiences):
            p, r = exp.prompt_length, exp.response_length
            input_ids[i, P - p : P + r] = exp.tokens
            attention_mask[i, P - p : P + r] = 1
            advantages[i, :r] = exp.advantages
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        response_mask = attention_mask[:, P:].float()
        return input_ids, attention_mask, position_ids, response_mask, advantages, P, R

    def step(self, experiences: list[Experience]) -> float:
        input_ids, attention_mask, position_ids, response_mask, advantages, P, R = self.pad(experiences)
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        logits = logits[:, P - 1 : P + R - 1].float()
        labels = input_ids[:, P:]
        logprobs = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
        ratio = torch.exp(torch.clamp(logprobs - logprobs.detach(), -20.0, 20.0))
        per_token = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH))
        per_token = torch.where(advantages < 0, torch.minimum(per_token, -advantages * DUAL_CLIP), per_token)
        loss = (per_token * response_mask).sum() / response_mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        return float(loss.detach())


def make_trainer(model_path: str, batch_size: int, run_dir: str, pad_token_id: int) -> Trainer:
    settings = TrainerSettings(
        model_path=model_path,
        lr=LR,
        betas=BETAS,
        weight_decay=WEIGHT_DECAY,
        grad_clip=GRAD_CLIP,
        micro_batch_size=batch_size,
        loss=LossSettings(
            policy_loss_fn="ppo",
            policy_loss_fn_args={"clip_range": CLIP_LOW, "clip_ratio_c": DUAL_CLIP},
            advantage_fn="grpo",
        ),
    )
    return Trainer(settings, run_dir=run_dir, pad_token_id=pad_token_id)


# ---------------------------------------------------------------------------- timing
def time_paired(trivium_step, bare_step, batches, trivium_first: bool) -> tuple[list[float], list[float]]:
    """Seconds of each path on each batch, the two run back to back on the same batch."""
    trivium_times, bare_times = [], []
    for experiences in batches:
        order = [(trivium_step, trivium_times), (bare_step, bare_times)]
        if not trivium_first:
            order.reverse()
        for step, times in order:
            start = time.perf_counter()
            step(experiences)
            times.append(time.perf_counter() - start)
    return trivium_times, bare_times


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_pieces(trainer: Trainer, experiences: list[Experience], repeats: int) -> dict[str, float]:
    """Median seconds of each piece of trivium's step that the bare loop does differently."""
    batch = ExperienceBatch.from_experiences(experiences, trainer.pad_token_id)
    plan = trainer.plan(batch)
    rows = plan[0]
    micro = batch.select(rows)
    with torch.no_grad():
        logprobs, _ = response_logprobs(trainer.actor, micro)
    old = logprobs.detach() + 0.01
    ppo = POLICY_LOSS_FNS.get("ppo")
    args = dict(logprobs=logprobs, old_logprobs=old, advantages=micro.advantages, response_mask=micro.response_mask,
                clip_range=CLIP_LOW, clip_ratio_c=DUAL_CLIP)

    def loss_only():
        ratio = torch.exp(torch.clamp(logprobs - old, -20.0, 20.0))
        adv = micro.advantages
        per_token = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH))
        per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * DUAL_CLIP), per_token)
        return (per_token * micro.response_mask).sum() / micro.response_mask.sum()

    def plan_and_select():
        return [batch.select(rows) for rows in trainer.plan(batch)]

    def step_metrics():
        # The floats trivium reads besides the loss's own metrics, each a reduction plus .item().
        return (
            float(-(logprobs * micro.response_mask).sum() / micro.response_mask.sum()),
            float(micro.response_mask.sum(dim=1).mean()),
            float(batch.rewards.mean()),
            batch.num_tokens,
        )

    bare = BareLoop.__new__(BareLoop)  # only its padding is timed; no model needed
    bare.pad_token_id = trainer.pad_token_id
    return {
        "ExperienceBatch.from_experiences": median_seconds(
            lambda: ExperienceBatch.from_experiences(experiences, trainer.pad_token_id), repeats),
        "bare loop padding": median_seconds(lambda: bare.pad(experiences), repeats),
        "plan + batch.select(rows) (index copy + trim)": median_seconds(plan_and_select, repeats),
        "ppo loss with its 4 metrics": median_seconds(lambda: ppo(**args), repeats),
        "same loss, no metrics": median_seconds(loss_only, repeats),
        "entropy estimate + step metrics (float reads)": median_seconds(step_metrics, repeats),
        "loss_scale (two denominators)": median_seconds(lambda: loss_scale(micro, batch, "token-mean"), repeats),
        "scheduler.step()": median_seconds(trainer.scheduler.step, repeats),
        "staleness control": median_seconds(lambda: trainer.apply_staleness_control(experiences), repeats),
    }


def profile_trainer(trainer: Trainer, batches, top: int = 14) -> list[tuple[str, float, float]]:
    """cProfile of trivium's steps: (function, cumulative ms/step, own ms/step), biggest first."""
    profiler = cProfile.Profile()
    profiler.enable()
    for experiences in batches:
        trainer.train_step(experiences)
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    rows = []
    for (filename, line, name), (_, _, own, cumulative, _) in stats.items():
        if "trivium" not in filename and name not in ("backward", "step", "clip_grad_norm_", "_call_impl"):
            continue
        short = f"{Path(filename).name}:{name}"
        rows.append((short, cumulative * 1e3 / len(batches), own * 1e3 / len(batches)))
    rows.sort(key=lambda row: -row[1])
    return rows[:top]


# ---------------------------------------------------------------------------- report
def run_preset(preset: str, args, workdir: Path) -> dict:
    model_path = str(build_tiny_model(workdir / preset, preset=preset, seed=0))
    config = AutoModelForCausalLM.from_pretrained(model_path).config
    pad_token_id = int(config.pad_token_id or 0)
    trivium = make_trainer(model_path, args.batch, str(workdir / f"run_{preset}"), pad_token_id)
    bare = BareLoop(model_path, pad_token_id)
    batches = make_batches(args.steps, args.batch, config.vocab_size, seed=1)
    n_params = sum(p.numel() for p in {id(p): p for p in bare.model.parameters()}.values())

    # Warm up allocator and kernels on both paths.
    for experiences in batches[:2]:
        trivium.train_step(experiences)
        bare.step(experiences)

    # Pairing per batch, not per repeat, keeps a burst of load from other jobs on one path only
    # out of the ratio: each ratio compares two runs a fraction of a second apart.
    trivium_rates, bare_rates, pair_ratios = [], [], []
    for repeat in range(args.repeats):
        trivium_times, bare_times = time_paired(trivium.train_step, bare.step, batches, trivium_first=repeat % 2 == 0)
        trivium_rates.append(len(batches) / sum(trivium_times))
        bare_rates.append(len(batches) / sum(bare_times))
        pair_ratios += [t / b for t, b in zip(trivium_times, bare_times)]
        print(f"{preset} repeat {repeat}: trivium {trivium_rates[-1]:.2f} steps/s, bare {bare_rates[-1]:.2f} steps/s, "
              f"median paired ratio {statistics.median(pair_ratios[-len(batches):]):.3f}", flush=True)

    pieces = measure_pieces(trivium, batches[0], repeats=50)
    profile = profile_trainer(trivium, batches[: min(len(batches), 5)])
    quartiles = statistics.quantiles(pair_ratios, n=4)
    return {
        "preset": preset,
        "params": n_params,
        "trivium_s": 1 / statistics.median(trivium_rates),
        "bare_s": 1 / statistics.median(bare_rates),
        "ratio": statistics.median(pair_ratios),
        "ratio_range": (quartiles[0], quartiles[2]),
        "pairs": len(pair_ratios),
        "pieces": pieces,
        "profile": profile,
    }


def overhead_summary(results: list[dict]) -> list[str]:
    """Sentences that add up trivium's extra per-step Python work from the timed pieces."""
    lines = []
    for r in results:
        p = r["pieces"]
        batch_extra = p["ExperienceBatch.from_experiences"] - p["bare loop padding"]
        metrics_extra = p["ppo loss with its 4 metrics"] - p["same loss, no metrics"]
        metrics_extra += p["entropy estimate + step metrics (float reads)"]
        rest = (p["plan + batch.select(rows) (index copy + trim)"] + p["loss_scale (two denominators)"]
                + p["scheduler.step()"] + p["staleness control"])
        total = batch_extra + metrics_extra + rest
        measured = r["trivium_s"] - r["bare_s"]
        lines.append(
            f"- {r['preset']}: the pieces add up to {total * 1e3:.2f} ms of extra work per step "
            f"({total / r['bare_s']:.1%} of the bare step): batch building {batch_extra * 1e3:.2f} ms more than "
            f"the bare padding, loss metrics and float reads {metrics_extra * 1e3:.2f} ms, plan/select/trim, "
            f"loss scale, scheduler and staleness together {rest * 1e3:.2f} ms. The difference of the median "
            f"step times is {measured * 1e3:+.1f} ms ({r['trivium_s'] / r['bare_s'] - 1:+.1%})."
        )
    return lines


def write_report(results: list[dict], args, path: Path) -> str:
    lines = [
        "# Trainer overhead: `Trainer.train_step` vs. a bare PyTorch loop",
        "",
        (f"Batch of {args.batch} GRPO-style experiences (prompts 16-24 tokens, responses 6-14, advantages "
         f"given, groups of {GROUP_SIZE}), ppo loss (clip 0.2, dual clip 3, token-mean), no KL, no critic, "
         f"one AdamW step per batch (lr {LR}, betas {BETAS}, weight decay {WEIGHT_DECAY}, foreach), "
         f"grad-norm clip {GRAD_CLIP}, whole batch as one micro-batch, float32. {args.steps} distinct batches "
         f"per repeat, {args.repeats} repeats. Each batch is run by both paths back to back (which goes first "
         "alternates between repeats); steps/s are medians over repeats, the ratio is the median over all "
         "paired steps, with its quartiles."),
        "",
        (f"Machine: {cpu_model()}, {os.cpu_count()} cores (shared with other jobs, load average "
         f"{load_average()} at the end), torch {torch.__version__}, {torch.get_num_threads()} torch threads, "
         f"Python {platform.python_version()}."),
        "",
        "| preset | parameters | trivium steps/s | bare steps/s | ratio (trivium time / bare time) | ratio quartiles |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        low, high = r["ratio_range"]
        lines.append(f"| {r['preset']} | {r['params'] / 1e6:.2f}M | {1 / r['trivium_s']:.2f} | "
                     f"{1 / r['bare_s']:.2f} | {r['ratio']:.3f} | {low:.3f}-{high:.3f} |")
    lines += ["", "## Where trivium's extra time goes", "",
              "Median of 50 calls of each piece on the first batch, in milliseconds, next to the step time.", ""]
    header = "| piece | " + " | ".join(f"{r['preset']} (ms)" for r in results) + " |"
    lines += [header, "| --- |" + " ---: |" * len(results)]
    lines.append("| whole trivium step | " + " | ".join(f"{r['trivium_s'] * 1e3:.1f}" for r in results) + " |")
    lines.append("| whole bare step | " + " | ".join(f"{r['bare_s'] * 1e3:.1f}" for r in results) + " |")
    for key in results[0]["pieces"]:
        lines.append(f"| {key} | " + " | ".join(f"{r['pieces'][key] * 1e3:.2f}" for r in results) + " |")
    lines += ["", *overhead_summary(results)]
    for r in results:
        lines += ["", f"cProfile of 5 trivium steps, {r['preset']} preset (ms per step; cProfile slows Python code):",
                  "", "| function | cumulative | own |", "| --- | ---: | ---: |"]
        lines += [f"| `{name}` | {cum:.2f} | {own:.2f} |" for name, cum, own in r["profile"]]
    lines += ["", f"Command: `python benchmarks/trainer_overhead.py --preset {' '.join(args.preset)} "
              f"--batch {args.batch} --steps {args.steps} --repeats {args.repeats}"
              + (f" --torch-threads {args.torch_threads}`" if args.torch_threads else "`"), ""]
    report = "\n".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", nargs="+", default=["tiny", "small"], choices=["tiny", "small"])
    parser.add_argument("--batch", type=int, default=128, help="experiences per train step")
    parser.add_argument("--steps", type=int, default=20, help="distinct batches timed per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="alternating repeats of each path")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads for both paths")
    parser.add_argument("--output", type=Path, default=RESULTS_FILE)
    args = parser.parse_args()
    if args.batch < GROUP_SIZE or args.steps < 1 or args.repeats < 1:
        parser.error(f"--batch must be >= {GROUP_SIZE}, --steps and --repeats >= 1")
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)

    with tempfile.TemporaryDirectory() as tmp:
        results = [run_preset(preset, args, Path(tmp)) for preset in args.preset]
    report = write_report(results, args, args.output)
    print()
    print(report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
