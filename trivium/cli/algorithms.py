"""``trivium algorithms``: every algorithm preset with its components and a one-line summary."""

from __future__ import annotations

import argparse

from trivium.cli.command import add_command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "algorithms", run_algorithms)
    parser.add_argument("--functions", action="store_true", help="also list every registered function by family")


def describe_preset(name: str, preset) -> list[str]:
    needs = [
        label
        for flag, label in (
            (preset.group_based, f"repeat_times >= {preset.min_repeat_times}"),
            (preset.use_critic, "a critic"),
            (preset.needs_greedy_baseline, "a greedy rollout per task"),
            (preset.needs_teacher_logprobs, "a teacher (explorer.auxiliary_models[0])"),
            (preset.needs_expert_data, "an expert dataset (auxiliary_buffers)"),
            (preset.train_only, "mode: train with a dataset"),
        )
        if flag
    ]
    lines = [
        f"{name}: {preset.summary}",
        f"    advantage_fn={preset.advantage_fn}  policy_loss_fn={preset.policy_loss_fn}  "
        f"kl_loss_fn={preset.kl_loss_fn}  kl_penalty_fn={preset.kl_penalty_fn}  "
        f"entropy_loss_fn={preset.entropy_loss_fn}  sample_strategy={preset.sample_strategy}  "
        f"loss_agg_mode={preset.loss_agg_mode}",
    ]
    if needs:
        lines.append(f"    needs: {', '.join(needs)}")
    if preset.reference:
        lines.append(f"    from: {preset.reference}")
    return lines


def run_algorithms(args: argparse.Namespace) -> int:
    """list the algorithm types (algorithm.algorithm_type) and what each is made of

    List every registered algorithm preset: its advantage function, policy loss, KL and
    entropy terms, sample strategy, what it needs, and a one-line summary. Any component can be
    overridden in the algorithm section by name."""
    from trivium.algorithm import ADVANTAGE_FNS, ENTROPY_LOSS_FNS, KL_FNS, POLICY_LOSS_FNS, PRESETS

    for name in sorted(PRESETS):
        print("\n".join(describe_preset(name, PRESETS[name])))
    if args.functions:
        print()
        for family, registry in (
            ("advantage_fn", ADVANTAGE_FNS), ("policy_loss_fn", POLICY_LOSS_FNS),
            ("kl_loss_fn / kl_penalty_fn", KL_FNS), ("entropy_loss_fn", ENTROPY_LOSS_FNS),
        ):
            print(f"{family}: {', '.join(registry.names())}")
    return 0
