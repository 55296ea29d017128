"""The scaling sweep's report: per-axis tables, curves (PNG) and where trivium's step time goes."""

from __future__ import annotations

import statistics
from pathlib import Path

AXIS_FIELDS = {
    "model": "model",
    "length": "response_tokens",
    "group": "group_size",
    "batch": "prompts_per_step",
}
AXIS_TITLES = {
    "model": "model size",
    "length": "response length (tokens)",
    "group": "group size (samples per prompt)",
    "batch": "batch (prompts per step)",
}
SYSTEMS = ("trivium", "trl")
PIECE_ORDER = [
    ("rollout: prompts", "rollout: render + tokenize prompts"),
    ("rollout: prefill", "rollout: prefill (engine)"),
    ("rollout: decode forward", "rollout: decode forwards (engine)"),
    ("rollout: sampling and loop", "rollout: sampling, stops, bookkeeping (engine)"),
    ("rollout: experiences", "rollout: reward + experiences"),
    ("train: old logprobs", "train: logprob recomputation"),
    ("train: advantages", "train: advantages"),
    ("train: forward", "train: forward (logprobs)"),
    ("train: backward", "train: backward"),
    ("train: grad clip", "train: gradient clipping"),
    ("train: optimizer", "train: optimizer step"),
    ("train: other", "train: other (batch building, loss, metrics)"),
    ("weight sync", "weight sync to the engine"),
]


# ---------------------------------------------------------------------------- derived numbers
def point_key(point: dict) -> str:
    return f"{point['model']}-L{point['response_tokens']}-G{point['group_size']}-B{point['prompts_per_step']}"


def axis_points(base: dict, axis: str, values: list) -> list[dict]:
    """The points of one axis: the base point with one field varied."""
    return [dict(base, **{AXIS_FIELDS[axis]: value}) for value in values]


def index_measurements(measurements: list[dict]) -> dict[tuple[str, str], dict]:
    """One record per (system, point): the timed steps of all its rounds pooled, the highest
    peak RSS, the mean of each piece; a point that failed in any round keeps that round's error."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for m in measurements:
        runs.setdefault((m["system"], point_key(m["point"])), []).append(m)
    return {key: pooled(group) for key, group in runs.items()}


def pooled(group: list[dict]) -> dict:
    good = [m for m in group if ok(m)]
    if not good:
        return group[0]
    out = dict(good[0])
    out["step_seconds"] = [s for m in good for s in m["step_seconds"]]
    out["rollout_seconds"] = [s for m in good for s in m["rollout_seconds"]]
    out["peak_rss_mb"] = max(m["peak_rss_mb"] for m in good)
    out["pieces"] = {k: statistics.fmean(m["pieces"].get(k, 0.0) for m in good) for k in good[0]["pieces"]}
    out["runs"] = len(good)
    return out


def ok(m: dict | None) -> bool:
    return bool(m and not m.get("error") and m.get("step_seconds"))


def step_s(m: dict) -> float:
    return statistics.median(m["step_seconds"])


def rollout_s(m: dict) -> float:
    return statistics.median(m["rollout_seconds"])


def train_s(m: dict) -> float:
    """The rest of the step: training (and, for trivium, the weight hand-back)."""
    return statistics.median(s - r for s, r in zip(m["step_seconds"], m["rollout_seconds"]))


def rollout_rate(m: dict) -> float:
    return m["rollout_tokens"] / rollout_s(m)


def train_rate(m: dict) -> float:
    return m["train_tokens"] / train_s(m)


def step_ms_per_token(m: dict) -> float:
    """Step milliseconds per trained token: flat when cost grows linearly with the work."""
    return step_s(m) * 1e3 / m["train_tokens"]


def rows(point: dict) -> int:
    return point["group_size"] * point["prompts_per_step"]


# ---------------------------------------------------------------------------- tables
def axis_table(axis: str, points: list[dict], by_key: dict, params: dict[str, int]) -> list[str]:
    lines = [
        f"### {AXIS_TITLES[axis].capitalize()}",
        "",
        f"![{axis}](scaling_{axis}.png)",
        "",
        ("| point | rows | tokens/step (gen / train) | system | step s | rollout s | train s | rollout tok/s "
         "| train tok/s | ms per trained token | peak RSS MB | trivium speed-up |"),
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for point in points:
        key = point_key(point)
        label = f"{point['model']} ({params.get(point['model'], 0) / 1e6:.1f}M)" if axis == "model" \
            else str(point[AXIS_FIELDS[axis]])
        trivium, trl = by_key.get(("trivium", key)), by_key.get(("trl", key))
        speedup = f"{step_s(trl) / step_s(trivium):.2f}x" if ok(trivium) and ok(trl) else "-"
        for system, m in (("trivium", trivium), ("trl", trl)):
            if not ok(m):
                reason = (m or {}).get("error") or "not run"
                lines.append(f"| {label} | {rows(point)} | | {system} | {reason} | | | | | | | |")
                continue
            lines.append(
                f"| {label} | {rows(point)} | {m['rollout_tokens']:,} / {m['train_tokens']:,} | {system} "
                f"| {step_s(m):.2f} | {rollout_s(m):.2f} | {train_s(m):.2f} | {rollout_rate(m):,.0f} "
                f"| {train_rate(m):,.0f} | {step_ms_per_token(m):.3f} | {m['peak_rss_mb']:,.0f} "
                f"| {speedup if system == 'trivium' else ''} |"
            )
    return lines + [""]


def growth_lines(axis: str, points: list[dict], by_key: dict) -> list[str]:
    """Per-token cost at the largest point of the axis against the smallest, per system and part."""
    if len(points) < 2:
        return []
    first, last = points[0], points[-1]
    out = []
    for system in SYSTEMS:
        a, b = by_key.get((system, point_key(first))), by_key.get((system, point_key(last)))
        if not (ok(a) and ok(b)):
            continue
        work = (f"{b['params'] / a['params']:.0f}x the parameters" if axis == "model"
                else f"{b['train_tokens'] / a['train_tokens']:.1f}x the trained tokens")
        parts = [
            f"step {step_s(b) / step_s(a):.2f}x",
            f"rollout per generated token {rollout_s(b) / b['rollout_tokens'] / (rollout_s(a) / a['rollout_tokens']):.2f}x",
            f"train per trained token {train_s(b) / b['train_tokens'] / (train_s(a) / a['train_tokens']):.2f}x",
        ]
        out.append(f"- {AXIS_TITLES[axis]}, {system}: {work} from "
                   f"{first[AXIS_FIELDS[axis]]} to {last[AXIS_FIELDS[axis]]}; " + ", ".join(parts) + ".")
    return out


def computed_tokens(m: dict) -> float:
    """Tokens trivium's trainer runs through the model: each group's prompt once, every response."""
    point = m["point"]
    response = rows(point) * point["response_tokens"]
    prompt_per_row = (m["train_tokens"] - response) / rows(point)
    return response + point["prompts_per_step"] * prompt_per_row


def largest_growth(values: list[float]) -> float:
    """The largest ratio of a value to one before it (1.0 when the values never rise)."""
    return max([values[j] / values[i] for i in range(len(values)) for j in range(i + 1, len(values))] + [1.0])


def scaling_check(axes: dict[str, list], base: dict, by_key: dict) -> list[str]:
    """Does trivium's cost per unit of work stay flat where it should? Numbers per axis."""
    lines = []
    for axis in ("batch", "group"):
        if axis not in axes:
            continue
        got = [(p[AXIS_FIELDS[axis]], by_key.get(("trivium", point_key(p)))) for p in axis_points(base, axis, axes[axis])]
        got = [(x, m) for x, m in got if ok(m)]
        if len(got) < 2:
            continue
        train = [train_s(m) * 1e6 / computed_tokens(m) for _, m in got]
        decode = [m["pieces"].get("rollout: decode forward", 0.0) * 1e6 / m["rollout_tokens"] for _, m in got]
        other = [(m["pieces"].get("train: other", 0.0) + m["pieces"].get("rollout: sampling and loop", 0.0))
                 * 1e6 / m["rollout_tokens"] for _, m in got]
        worst = max(largest_growth(train), largest_growth(decode), largest_growth(other))
        verdict = (f"no cost per unit grows by more than {worst:.2f}x from one point to a larger one"
                   if worst < 1.3 else f"a cost per unit grows {worst:.2f}x: it grows faster than the work")
        values = ", ".join(str(x) for x, _ in got)
        lines.append(
            f"- {AXIS_TITLES[axis]} ({values}): train microseconds per computed token "
            f"{' / '.join(f'{v:.0f}' for v in train)}; engine decode-forward microseconds per generated token "
            f"{' / '.join(f'{v:.1f}' for v in decode)}; Python bookkeeping (sampling loop + trainer other) "
            f"microseconds per generated token {' / '.join(f'{v:.1f}' for v in other)}. Per unit of work: {verdict}."
        )
    if "length" in axes:
        got = [(p["response_tokens"], by_key.get(("trivium", point_key(p))))
               for p in axis_points(base, "length", axes["length"])]
        got = [(x, m) for x, m in got if ok(m)]
        if len(got) >= 2:
            decode = [m["pieces"].get("rollout: decode forward", 0.0) * 1e3 / x for x, m in got]
            train = [train_s(m) * 1e6 / computed_tokens(m) for _, m in got]
            lines.append(
                f"- response length ({', '.join(str(x) for x, _ in got)}): engine decode-forward milliseconds per "
                f"step (all {rows(base)} rows) {' / '.join(f'{v:.2f}' for v in decode)}; train microseconds per "
                f"computed token {' / '.join(f'{v:.0f}' for v in train)}. The linear layers do the same work per "
                "token at every length; what grows is attention, which reads the whole key/value cache at every "
                "decode step and attends over the whole sequence in training (cost per token proportional to the "
                "length)."
            )
    return lines


def pieces_table(axes: dict[str, list], base: dict, by_key: dict) -> list[str]:
    """Trivium's step split into its stages, at the largest point of each axis."""
    largest = []
    for axis, values in axes.items():
        point = axis_points(base, axis, values)[-1]
        m = by_key.get(("trivium", point_key(point)))
        if ok(m) and point_key(point) not in [point_key(p) for _, p, _ in largest]:
            largest.append((axis, point, m))
    if not largest:
        return []
    header = "| stage | " + " | ".join(f"{point_key(p)} ms | share" for _, p, _ in largest) + " |"
    lines = [header, "| --- |" + " ---: | ---: |" * len(largest)]
    for key, label in PIECE_ORDER:
        cells = []
        for _, _, m in largest:
            seconds = m["pieces"].get(key, 0.0)
            whole = sum(m["pieces"].get(k, 0.0) for k, _ in PIECE_ORDER) or 1.0
            cells.append(f"{seconds * 1e3:,.0f} | {seconds / whole:.0%}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for _, point, _ in largest:
        trl = by_key.get(("trl", point_key(point)))
        if ok(trl):
            cells.append(f"{trl['pieces']['rollout: generate and score'] * 1e3:,.0f} gen + "
                         f"{trl['pieces']['train: the rest of the step'] * 1e3:,.0f} train | ")
        else:
            cells.append("- | ")
    lines.append("| TRL at the same point (ms) | " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------------------- curves
def plot_axis(axis: str, points: list[dict], by_key: dict, out: Path, params: dict[str, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    field = AXIS_FIELDS[axis]
    xs_all = [params.get(p["model"], 0) / 1e6 if axis == "model" else p[field] for p in points]
    fig, panels = plt.subplots(1, 3, figsize=(15, 4.2))
    styles = {"trivium": {"color": "tab:blue"}, "trl": {"color": "tab:orange"}}
    for system in SYSTEMS:
        got = [(x, by_key.get((system, point_key(p)))) for x, p in zip(xs_all, points)]
        got = [(x, m) for x, m in got if ok(m)]
        if not got:
            continue
        xs = [x for x, _ in got]
        panels[0].plot(xs, [step_s(m) for _, m in got], marker="o", label=system, **styles[system])
        panels[1].plot(xs, [rollout_rate(m) for _, m in got], marker="o", label=f"{system} rollout", **styles[system])
        panels[1].plot(xs, [train_rate(m) for _, m in got], marker="s", linestyle="--", label=f"{system} train",
                       **styles[system])
        panels[2].plot(xs, [m["peak_rss_mb"] for _, m in got], marker="o", label=system, **styles[system])
    titles = ("step time (s)", "tokens/s", "peak RSS (MB)")
    for panel, title in zip(panels, titles):
        panel.set_title(title)
        panel.set_xlabel("parameters (M)" if axis == "model" else AXIS_TITLES[axis])
        panel.set_xscale("log", base=2)
        labels = [f"{p['model']}\n{x:.1f}M" for p, x in zip(points, xs_all)] if axis == "model" \
            else [f"{x:g}" for x in xs_all]
        panel.set_xticks(xs_all, labels)
        panel.minorticks_off()
        if title != "peak RSS (MB)":
            panel.set_yscale("log")
        panel.grid(True, which="both", alpha=0.3)
        panel.legend(fontsize=8)
    fig.suptitle(f"How cost grows with {AXIS_TITLES[axis]}")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------------- the whole report
def render(data: dict, results_dir: Path, stem: str) -> str:
    by_key = index_measurements(data["measurements"])
    base, axes = data["base"], data["axes"]
    params = {m["point"]["model"]: m["params"] for m in data["measurements"] if m.get("params")}
    quick = data.get("quick")
    lines = [
        "# How cost grows: rollout and training with the work" + (" (--quick smoke run)" if quick else ""),
        "",
        data["machine"],
        "",
        f"`{data['command']}` took {data['minutes']:.1f} minutes.",
        "",
        (f"Base point: model {base['model']}, responses of {base['response_tokens']} tokens, groups of "
         f"{base['group_size']}, {base['prompts_per_step']} prompts per step ({rows(base)} rows); each axis varies "
         "one of these. Each system runs each point in a process of its own: "
         f"{data['warmup_steps']} warm-up step(s), then {data['timed_steps']} timed steps, in each of "
         f"{data.get('rounds', 1)} round(s) (the next round walks the points backwards); the tables give the "
         "median of the pooled timed steps and the highest peak RSS. The two systems alternate which goes first from point to point. Every worker runs torch with "
         f"{data.get('threads', 1)} thread(s) (`OMP_NUM_THREADS`): on cores shared with other jobs, a second "
         "OpenMP thread that loses its core stalls every parallel region and made single steps up to 20x slower. "
         "trivium: the `hf` engine samples (every "
         "response forced to the exact length), `Trainer.train_step` trains (GRPO, ppo clip 0.2, token-mean, "
         "AdamW, default token-budget micro-batches), the weights go back to the engine. TRL: `GRPOTrainer`, "
         "float32, no gradient checkpointing, no vLLM, `min_new_tokens` = `max_completion_length`, the whole "
         "batch as one micro-batch. Same prompts, group size, batch, learning rate, clip and reward. "
         "Rollout s is trivium's render + engine call + experiences, and TRL's "
         "`_generate_and_score_completions`; train s is the rest of the step. Tokens/s divide the same token "
         "counts: generated tokens by rollout s, prompt + response tokens by train s. The speed-up is TRL's "
         "step time over trivium's."),
        "",
    ]
    for axis, values in axes.items():
        points = axis_points(base, axis, values)
        lines += axis_table(axis, points, by_key, params)
        plot_axis(axis, points, by_key, results_dir / f"{stem}_{axis}.png", params)
    lines += ["## Per-token cost from the smallest to the largest point of each axis", ""]
    for axis, values in axes.items():
        lines += growth_lines(axis, axis_points(base, axis, values), by_key)
    lines += ["", "## Scaling check (trivium)", "",
              ("Cost per unit of work along each axis; \"computed tokens\" count each group's prompt once, as "
               "the trainer's shared prompt pass computes it."), ""]
    lines += scaling_check(axes, base, by_key)
    lines += ["", "## Where the time goes (trivium, largest point of each axis)", "",
              ("Mean milliseconds per timed step of each stage, timed by wrapping the functions that do it "
               "(`HFEngine`'s decoder prefill/decode, the trainer's forward, `Tensor.backward`, gradient clipping, "
               "`optimizer.step`, advantages, logprob recomputation); `other` rows are what the wrapped calls "
               "leave of their stage."), ""]
    lines += pieces_table(axes, base, by_key)
    lines += ["", *data.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"
