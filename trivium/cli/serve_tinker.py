"""``trivium serve-tinker``: serve the Tinker training API on local models (docs/tinker.md)."""

from __future__ import annotations

import argparse
import os

from trivium.cli.command import add_command

API_KEY_ENV = "TRIVIUM_TINKER_API_KEY"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "serve-tinker", run_serve_tinker)
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="a local model directory to serve as a base model, under NAME (the SDK's base_model) "
        "or, without NAME, under its path and its directory name; repeatable",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: only this machine can connect)",
    )
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"key every request must carry (default: ${API_KEY_ENV}; none: no check). "
        "The SDK sends its api_key, which must start with tml-",
    )
    parser.add_argument(
        "--checkpoint-dir",
        default="./tinker_checkpoints",
        metavar="DIR",
        help="where save_state and save_weights_for_sampler write (default ./tinker_checkpoints)",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=64 * 2**20,
        help="largest request body accepted (default 64 MiB)",
    )


def run_serve_tinker(args: argparse.Namespace) -> int:
    """serve the Tinker training API (LoRA training and sampling) on local models

    Serve the Tinker API's training and sampling endpoints so that recipes written for the
    Tinker SDK run on this machine: point tinker.ServiceClient(base_url=...) at it. See docs/tinker.md."""
    from trivium.tinker_server.server import build_state, serve

    state = build_state(args.model, args.checkpoint_dir)
    names = ", ".join(sorted(state.options.base_models))
    print(f"trivium serve-tinker: http://{args.host}:{args.port} serving {names}; Ctrl+C stops it")
    serve(
        state, host=args.host, port=args.port, api_key=args.api_key, max_request_bytes=args.max_request_bytes
    )
    return 0
