"""Frozen lake maps as dataset rows (see ``trivium.envs.frozen_lake`` for the rules).

Owns the map space: every ``size`` x ``size`` map with the goal in the bottom-right corner,
1 to ``max_holes`` holes and the start on any other frozen cell, kept when the goal can be
reached. A seeded sample of it is drawn without replacement, so train and test never share
a map. Each row also carries an SFT target for a format warm-up: ``response`` is a move
drawn uniformly at random, so the warm-up teaches how to answer, not which move is good.
"""

from __future__ import annotations

import itertools
import random

from trivium.envs.frozen_lake import MOVES, FrozenLake, solvable
from trivium.errors import UserError


def map_space(size: int, max_holes: int) -> list[list[str]]:
    if size < 2 or max_holes < 0:
        raise UserError(f"frozen lake needs --size >= 2 and --max-holes >= 0, got {size} and {max_holes}")
    goal = (size - 1, size - 1)
    cells = [(r, c) for r in range(size) for c in range(size) if (r, c) != goal]
    maps = []
    for holes_count in range(1, max_holes + 1):
        for holes in itertools.combinations(cells, holes_count):
            for start in cells:
                if start in holes:
                    continue
                grid = [["."] * size for _ in range(size)]
                for r, c in holes:
                    grid[r][c] = "H"
                grid[start[0]][start[1]] = "S"
                grid[goal[0]][goal[1]] = "G"
                rows = ["".join(row) for row in grid]
                if solvable(rows):
                    maps.append(rows)
    return maps


def generate_frozen_lake(count: int, rng: random.Random, size: int = 3, max_holes: int = 2) -> list[dict]:
    """``count`` distinct solvable maps, in a seeded random order."""
    space = map_space(size, max_holes)
    if count > len(space):
        raise UserError(
            f"asked for {count} frozen lake maps but only {len(space)} distinct {size}x{size} maps "
            f"with at most {max_holes} holes exist; lower --num-train/--num-test or raise --size/--max-holes"
        )
    rows = []
    for index in rng.sample(range(len(space)), count):
        lake = space[index]
        rows.append(
            {"map": lake, "question": FrozenLake(lake).observation(), "response": rng.choice(sorted(MOVES))}
        )
    return rows
