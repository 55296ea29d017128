"""``trivium init``: create a local model (tiny, or shaped like a public one) or a generated task dataset.

    trivium init model --preset tiny --out models/tiny
    trivium init model --preset qwen3-0.6b --layers 2 --out models/qwen3-2l
    trivium init data --task arithmetic --out data/arithmetic
    trivium init data --task frozen_lake --out data/frozen_lake --num-train 180 --num-test 35
    trivium init data --task reasoning_gym:basic_arithmetic --option max_terms=2 --out data/rg
    trivium init data --task gymnasium --env FrozenLake-v1 --env-kwargs '{"is_slippery": false}' --out data/lake4
    trivium init data --task textworld --world-size 1 --nb-objects 2 --quest-length 1 --out data/textworld

Heavy imports (torch, transformers) happen inside the handlers, so ``trivium --help``
stays fast.
"""

from __future__ import annotations

import argparse
import time

from trivium.cli.command import add_command

TINY_PRESETS = ("tiny", "small", "medium")
# The tiny shape with a tokenizer and chat template that render tools (trivium/models/tiny_tools.py).
TOOLS_PRESETS = ("tiny-tools",)
# The real-shape presets (trivium/models/real_shapes.py), listed here so --help stays fast.
REAL_SHAPE_PRESETS = ("qwen2.5-0.5b", "qwen3-0.6b", "llama3.2-1b")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "init",
        help="create a local model or a generated dataset",
        description="Create local artifacts so a run needs nothing from a model or dataset hub.",
    )
    targets = parser.add_subparsers(dest="init_target", metavar="WHAT", required=True)

    model = add_command(targets, "model", init_model, quiet_libraries=True)
    model.add_argument(
        "--preset", choices=TINY_PRESETS + TOOLS_PRESETS + REAL_SHAPE_PRESETS, default="tiny",
        help="tiny ~0.8M, small ~6M, medium ~25M parameters (Llama, ~400-token vocabulary, plain ChatML); "
        "tiny-tools: the tiny shape with the chat template with tools (docs/agents.md); "
        "or the exact architecture of a public model, random weights, the real vocabulary size and a chat "
        "template with tools and thinking: qwen2.5-0.5b (Qwen2), qwen3-0.6b (Qwen3), llama3.2-1b (Llama) "
        "(default: tiny)",
    )
    model.add_argument(
        "--layers", type=int, help="real-shape presets: build only this many decoder layers (default: all)"
    )
    model.add_argument("--out", required=True, help="output directory (must be new or empty)")
    model.add_argument(
        "--seed", type=int, default=0, help="random seed for the tokenizer corpus and the weights"
    )

    data = add_command(targets, "data", init_data, quiet_libraries=True)
    data.add_argument(
        "--task", required=True,
        help="arithmetic, countdown, frozen_lake, guessing, gymnasium, textworld, tool_arithmetic, or reasoning_gym:NAME (a reasoning-gym dataset)",
    )
    data.add_argument("--out", required=True, help="output directory")
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--num-train", type=int, default=1000)
    data.add_argument("--num-test", type=int, default=100)
    data.add_argument("--format", dest="fmt", choices=("jsonl", "parquet"), default="jsonl")
    data.add_argument("--overwrite", action="store_true", help="replace existing split files")
    data.add_argument("--subtraction", action="store_true", help="arithmetic: also a - b problems (a >= b)")
    data.add_argument(
        "--warmup-split",
        action="store_true",
        help="arithmetic: also write warmup.jsonl, the problems in neither split whose ones digits do not "
        "carry, for an SFT stage that teaches the answer format but not carrying",
    )
    data.add_argument("--num-numbers", type=int, help="countdown: numbers per problem (default 3)")
    data.add_argument(
        "--max-number",
        type=int,
        help="countdown: largest given number (default 20); guessing: top of the range (default 16)",
    )
    data.add_argument("--max-target", type=int, help="countdown: largest target (default 100)")
    data.add_argument("--size", type=int, help="frozen_lake: the lake's side (default 3)")
    data.add_argument("--max-holes", type=int, help="frozen_lake: most holes on a map (default 2)")
    data.add_argument("--env", help="gymnasium: the environment id (FrozenLake-v1, Taxi-v4, Blackjack-v1, ...)")
    data.add_argument("--env-kwargs", help='gymnasium: gymnasium.make keywords as JSON, e.g. \'{"is_slippery": false}\'')
    data.add_argument("--random-start", action="store_true", help="gymnasium FrozenLake: start each lake on a random cell")
    data.add_argument("--world-size", type=int, help="textworld: rooms per game (default 1)")
    data.add_argument("--nb-objects", type=int, help="textworld: objects per game (default 2)")
    data.add_argument("--quest-length", type=int, help="textworld: commands that win a game (default 1)")
    data.add_argument(
        "--careless-share", type=float,
        help="tool_arithmetic: share of SFT transcripts whose first call names its argument wrongly "
        "(default 0.5)",
    )
    data.add_argument(
        "--option", dest="options", action="append", default=[], metavar="KEY=VALUE",
        help="reasoning_gym:NAME: a field of the dataset's config, the value as JSON or text "
        "(repeatable), e.g. --option max_terms=2 --option 'operators=[\"+\"]'",
    )


def init_model(args: argparse.Namespace) -> int:
    """build a tokenizer and a randomly initialised decoder in Hugging Face format

    Train a tokenizer and create a random decoder; both load with
    AutoTokenizer / AutoModelForCausalLM.from_pretrained(OUT)."""
    from trivium.errors import UserError

    started = time.perf_counter()
    if args.preset in REAL_SHAPE_PRESETS:
        from trivium.models.real_shapes import build_real_shape_model

        out_dir = build_real_shape_model(args.out, args.preset, layers=args.layers, seed=args.seed)
    elif args.layers is not None:
        raise UserError(f"--layers applies to the real-shape presets ({', '.join(REAL_SHAPE_PRESETS)}), not {args.preset}.")
    elif args.preset in TOOLS_PRESETS:
        from trivium.models.tiny_tools import build_tiny_tools_model

        out_dir = build_tiny_tools_model(args.out, seed=args.seed)
    else:
        from trivium.models.tiny import build_tiny_model

        out_dir = build_tiny_model(args.out, preset=args.preset, seed=args.seed)
    depth = "" if args.layers is None else f" ({args.layers} layers)"
    print(f"wrote {args.preset} model{depth} to {out_dir} in {time.perf_counter() - started:.1f}s")
    return 0


def init_data(args: argparse.Namespace) -> int:
    """generate a task dataset with train and test splits

    Write OUT/train.<fmt> and OUT/test.<fmt>; datasets.load_dataset(OUT, split=...) reads them."""
    from trivium.data import build_task_data
    from trivium.errors import UserError

    task_flags = {
        "arithmetic": ("subtraction", "warmup_split"),
        "countdown": ("num_numbers", "max_number", "max_target"),
        "frozen_lake": ("size", "max_holes"),
        "guessing": ("max_number",),
        "gymnasium": ("env", "env_kwargs", "random_start"),
        "textworld": ("world_size", "nb_objects", "quest_length"),
        "tool_arithmetic": ("careless_share",),
    }
    given = {
        name: getattr(args, name)
        for names in task_flags.values()
        for name in names
        if getattr(args, name) is not None and getattr(args, name) is not False  # 0 and 0.0 are values
    }
    misplaced = [name for name in given if name not in task_flags.get(args.task, ())]
    if misplaced:
        flags = ", ".join("--" + name.replace("_", "-") for name in misplaced)
        owners = sorted({task for task, names in task_flags.items() for name in misplaced if name in names})
        raise UserError(f"{flags} only apply to --task {' / '.join(owners)}.")
    from trivium.data.reasoning_gym_tasks import is_reasoning_gym_task, parse_options

    if args.options and not is_reasoning_gym_task(args.task):
        raise UserError("--option only applies to --task reasoning_gym:NAME; see --help for this task's flags.")
    options = {**given, **parse_options(args.options)}
    out_dir = build_task_data(
        args.task,
        args.out,
        seed=args.seed,
        num_train=args.num_train,
        num_test=args.num_test,
        fmt=args.fmt,
        overwrite=args.overwrite,
        **options,
    )
    print(f"wrote {args.num_train} train and {args.num_test} test {args.task} rows to {out_dir}")
    return 0
