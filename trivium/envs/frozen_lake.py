"""Frozen lake: a text grid world. Walk from the start to the goal without falling in a hole.

A map is a list of equal-length rows over ``S`` (start, frozen), ``.`` (frozen), ``H``
(hole) and ``G`` (goal). The player sees the map with ``P`` where it stands and answers
one move: ``U``, ``D``, ``L`` or ``R``. A move into the edge leaves it in place; a hole ends
the episode unsuccessfully, the goal ends it successfully.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from trivium.errors import UserError

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
CELLS = set("S.HG")


@dataclass(frozen=True)
class MoveResult:
    observation: str
    done: bool
    success: bool
    valid: bool  # the reply named a move


def parse_map(rows: list[str] | str) -> list[str]:
    """The map as rows; raises UserError when it is not a rectangle with one S and one G."""
    rows = rows.split("\n") if isinstance(rows, str) else [str(row) for row in rows]
    text = "".join(rows)
    if not rows or len({len(row) for row in rows}) != 1 or set(text) - CELLS:
        raise UserError(f"a frozen lake map is equal-length rows of S . H G; got {rows!r}")
    if text.count("S") != 1 or text.count("G") != 1:
        raise UserError(f"a frozen lake map needs exactly one S and one G; got {rows!r}")
    return rows


def find(rows: list[str], cell: str) -> tuple[int, int]:
    for r, row in enumerate(rows):
        if cell in row:
            return r, row.index(cell)
    raise UserError(f"no {cell!r} on the map {rows!r}")


def solvable(rows: list[str]) -> bool:
    """True when a path of moves over frozen cells leads from S to G."""
    start, goal = find(rows, "S"), find(rows, "G")
    seen, queue = {start}, deque([start])
    while queue:
        r, c = queue.popleft()
        if (r, c) == goal:
            return True
        for dr, dc in MOVES.values():
            nr, nc = r + dr, c + dc
            if (
                0 <= nr < len(rows)
                and 0 <= nc < len(rows[0])
                and rows[nr][nc] != "H"
                and (nr, nc) not in seen
            ):
                seen.add((nr, nc))
                queue.append((nr, nc))
    return False


def parse_move(reply: str) -> str | None:
    """The move a reply names: its first non-blank character, if it is U, D, L or R."""
    stripped = reply.strip()
    return stripped[0].upper() if stripped and stripped[0].upper() in MOVES else None


class FrozenLake:
    def __init__(self, rows: list[str] | str):
        self.rows = parse_map(rows)
        self.position = find(self.rows, "S")

    def observation(self) -> str:
        r, c = self.position
        grid = [list(row.replace("S", ".")) for row in self.rows]
        grid[r][c] = "P"
        return "\n".join("".join(row) for row in grid)

    def move(self, reply: str) -> MoveResult:
        move = parse_move(reply)
        if move is None:
            return MoveResult(self.observation(), done=True, success=False, valid=False)
        dr, dc = MOVES[move]
        r, c = self.position[0] + dr, self.position[1] + dc
        if 0 <= r < len(self.rows) and 0 <= c < len(self.rows[0]):
            self.position = (r, c)
        cell = self.rows[self.position[0]][self.position[1]]
        return MoveResult(self.observation(), done=cell in "HG", success=cell == "G", valid=True)
