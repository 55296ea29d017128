"""``trivium studio``: serve the Studio (config builder, runs, live curves, experiences) on this machine."""

from __future__ import annotations

import argparse
import sys

from trivium.cli.command import add_command
from trivium.config.cli_args import add_plugin_dir_argument

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "studio", run_studio)
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--runs", default="./checkpoints", metavar="DIR",
                        help="folder of run directories <DIR>/<project>/<name>/ (default ./checkpoints)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: only this machine can connect)")
    add_plugin_dir_argument(parser)


def run_studio(args: argparse.Namespace) -> int:
    """serve a local web app to build a config, start a run, and watch it learn

    Serve the Studio: a config builder generated from the schema, the runs under --runs with
    their live curves and summaries, an experience browser, and run comparison. It reads run directories
    and buffers and writes only when it starts a run."""
    try:
        import uvicorn

        from trivium.studio.app import create_app
    except ModuleNotFoundError as error:
        if error.name and error.name.split(".")[0] in ("fastapi", "uvicorn", "starlette", "jinja2"):
            from trivium.errors import UserError

            raise UserError(f"the Studio needs {error.name}: pip install 'trivium[studio]'") from None
        raise
    from trivium.models.server import check_port_free

    if args.host not in LOCAL_HOSTS:
        print(
            f"warning: binding {args.host}: anyone who can reach this address can read your runs and start "
            "runs on this machine; the Studio has no login",
            file=sys.stderr,
        )
    from trivium.config.prepare import load_plugins
    from trivium.studio.launch import RunLauncher

    check_port_free(args.host, args.port)
    load_plugins(args.plugin_dir)  # so the builder's checks know the names they register
    app = create_app(runs_root=args.runs, launcher=RunLauncher(plugin_dirs=args.plugin_dir))
    print(f"trivium studio: http://{args.host}:{args.port}/ (runs under {app.state.runs_root}); Ctrl+C stops it")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
