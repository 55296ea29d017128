"""``trivium convert``: bring configs and checkpoints in and out of trivium.

trivium convert verl [--out FILE] -- <veRL key=value arguments>
trivium convert verl --script run.sh [--out FILE]
trivium convert checkpoint --path RUN/global_step_N [--out DIR] [--tokenizer PATH] [--merge-lora [--base-model PATH]]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trivium.cli.command import add_command
from trivium.errors import UserError

YAML_HEADER = (
    "# Converted from a veRL command by `trivium convert verl`; comments name the veRL source keys.\n"
    "# Check the dataset column names (format) before running: trivium run --config THIS_FILE\n"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert", help="convert veRL commands to configs; export checkpoints")
    kinds = parser.add_subparsers(dest="convert_kind", metavar="KIND", required=True)

    verl = add_command(kinds, "verl", run_verl)
    verl.add_argument("--script", type=Path, help="shell script that runs python3 -m verl.trainer.main_ppo")
    verl.add_argument("--out", type=Path, help="write the config here (default: print it)")
    verl.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    verl.add_argument("arguments", nargs="*", help="veRL key=value overrides (after '--')")

    checkpoint = add_command(kinds, "checkpoint", run_checkpoint, quiet_libraries=True)
    checkpoint.add_argument("--path", type=Path, required=True, help="the RUN/global_step_N directory")
    checkpoint.add_argument(
        "--out", type=Path, help="output directory (default: RUN/global_step_N/actor/huggingface)"
    )
    checkpoint.add_argument("--tokenizer", help="tokenizer source when the run's base model is elsewhere")
    checkpoint.add_argument(
        "--merge-lora", action="store_true",
        help="the checkpoint holds a LoRA adapter: merge it into its base model and write the merged model",
    )
    checkpoint.add_argument(
        "--base-model", help="base model of the adapter (default: the path the adapter records, else the run's "
        "model.model_path)",
    )


def run_verl(args: argparse.Namespace) -> int:
    """Turn a veRL main_ppo command (or the shell script that runs it) into a trivium config.

    Convert veRL key=value overrides into a trivium YAML config. Give the arguments
    after '--', or a launch script with --script. A report of mapped, passed-through and ignored
    keys is printed."""
    from trivium.interop.verl_import import convert_arguments, convert_script, format_report
    from trivium.interop.yaml_render import render_yaml

    arguments = [word for word in args.arguments if word != "--"]
    if args.script and arguments:
        raise UserError("give either --script FILE or veRL arguments after '--', not both")
    if args.script:
        if not args.script.is_file():
            raise UserError(f"script not found: {args.script}")
        conversion = convert_script(args.script.read_text(), str(args.script))
    else:
        conversion = convert_arguments(arguments)
    text = YAML_HEADER + render_yaml(conversion.config, conversion.comments)
    report = format_report(conversion)
    if args.out is None:
        sys.stdout.write(text)
        sys.stderr.write(report)
        return 0
    if args.out.exists() and not args.force:
        raise UserError(f"{args.out} exists; pass --force to overwrite it")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    sys.stdout.write(report)
    print(f"wrote {args.out}")
    return 0


def run_checkpoint(args: argparse.Namespace) -> int:
    """Export RUN/global_step_N as a Hugging Face model directory with its tokenizer."""
    from trivium.interop.checkpoint_export import export_checkpoint

    if args.base_model and not args.merge_lora:
        raise UserError("--base-model is for LoRA checkpoints; add --merge-lora")
    out_dir = export_checkpoint(
        args.path, args.out, args.tokenizer, merge_lora=args.merge_lora, base_model_path=args.base_model
    )
    print(f"exported {args.path} to {out_dir}")
    print(f"load it with: AutoModelForCausalLM.from_pretrained({str(out_dir)!r})")
    return 0
