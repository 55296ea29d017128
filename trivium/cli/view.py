"""``trivium view``: list the experiences stored in a buffer database, in the terminal.

As a table (one row per experience, prompt and response shortened), or with ``--turns`` turn by
turn: each message of a multi-turn episode with its role, the model's turns marked
``[trained]`` (from the experience's recorded turns, ``trivium/core/episode_turns.py``).
"""

from __future__ import annotations

import argparse

from trivium.cli.command import add_command
from trivium.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "view", run_view)
    parser.add_argument("--db", required=True, help="SQLAlchemy URL or SQLite file of the buffer.")
    parser.add_argument("--limit", type=int, default=20, help="How many experiences to show (default 20).")
    parser.add_argument("--offset", type=int, default=0, help="How many to skip first (default 0).")
    parser.add_argument("--buffer", default=None, help="Only this buffer name (default: every buffer).")
    parser.add_argument("--width", type=int, default=60, help="Characters shown of prompt and response.")
    parser.add_argument(
        "--turns",
        action="store_true",
        help="Show each experience whole, turn by turn (role, text, [trained] on the model's turns).",
    )


def _shorten(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def run_view(args: argparse.Namespace) -> int:
    """show experiences stored in a buffer database

    List experiences of a SQL buffer (or a queue's SQLite mirror) as a table."""
    from pathlib import Path

    from rich.console import Console
    from rich.text import Text
    from sqlalchemy import func, select
    from sqlalchemy.exc import DatabaseError

    from trivium.buffer.sql_engine import database_error, database_url, get_engine
    from trivium.buffer.sql_schema import ExperienceModel

    if args.limit < 0 or args.offset < 0:
        raise UserError("--limit and --offset must be >= 0")
    url = database_url(args.db)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
        raise UserError(f"No database at {args.db}; give the buffer's `path` (file or URL).")
    engine = get_engine(args.db)
    columns = (
        ExperienceModel.id,
        ExperienceModel.buffer,
        ExperienceModel.model_version,
        ExperienceModel.reward,
        ExperienceModel.use_count,
        ExperienceModel.prompt_text,
        ExperienceModel.response_text,
        ExperienceModel.info,
    )
    query = select(*columns).order_by(ExperienceModel.id).offset(args.offset).limit(args.limit)
    count = select(func.count()).select_from(ExperienceModel)
    if args.buffer:
        query = query.where(ExperienceModel.buffer == args.buffer)
        count = count.where(ExperienceModel.buffer == args.buffer)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).all()
            total = connection.execute(count).scalar_one()
            connection.commit()
    except DatabaseError as error:
        raise database_error(url, error) from error

    if getattr(args, "turns", False):  # `trivium debug --module viewer` builds its own arguments
        console = Console(soft_wrap=True, highlight=False)
        console.print(
            Text(f"{total} experience(s) in {args.db}" + (f" (buffer {args.buffer})" if args.buffer else ""))
        )
        for row in rows:
            print_turns(console, row)
    else:
        print_table(rows, total, args)
    if total > args.offset + len(rows):
        print(f"showing {args.offset + 1}-{args.offset + len(rows)} of {total}; use --offset to see more")
    return 0


def print_table(rows, total: int, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"{total} experience(s) in {args.db}" + (f" (buffer {args.buffer})" if args.buffer else ""),
        show_lines=False,
    )
    for header, justify in (
        ("id", "right"),
        ("buffer", "left"),
        ("version", "right"),
        ("reward", "right"),
        ("uses", "right"),
        ("prompt", "left"),
        ("response", "left"),
    ):
        table.add_column(header, justify=justify, overflow="fold")
    for row in rows:
        reward = "-" if row.reward is None else f"{row.reward:.3f}"
        table.add_row(
            str(row.id),
            row.buffer,
            str(row.model_version),
            reward,
            str(row.use_count),
            Text(_shorten(row.prompt_text, args.width)),  # as written: brackets are not markup
            Text(_shorten(row.response_text, args.width)),
        )
    Console(width=max(120, 2 * args.width + 50)).print(table)


def row_turns(row) -> list[dict]:
    """The recorded turns of a stored experience; a single-turn one as its prompt and response."""
    from trivium.core.episode_turns import TURNS_KEY

    turns = (row.info or {}).get(TURNS_KEY)
    if turns:
        return turns
    return [
        {"role": "prompt", "text": row.prompt_text or "", "trained": False},
        {"role": "response", "text": row.response_text or "", "trained": True},
    ]


def print_turns(console, row) -> None:
    """One experience, a line per turn: ``role [trained] text`` (the marker in colour on a terminal)."""
    from rich.text import Text

    reward = "-" if row.reward is None else f"{row.reward:.3f}"
    console.print(
        Text(
            f"\nexperience {row.id} · buffer {row.buffer} · version {row.model_version} · "
            f"reward {reward} · uses {row.use_count}",
            style="bold",
        )
    )
    for turn in row_turns(row):
        line = Text(f"  {turn['role']:<10} ", style="cyan")
        if turn["trained"]:
            line.append("[trained] ", style="bold green")
        line.append(turn["text"].rstrip().replace("\n", "\n" + " " * 13))
        console.print(line)
