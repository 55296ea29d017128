"""TextWorld games as dataset rows: generate and compile seeded games, one row per game.

Owns making the games with the ``textworld`` package's generator (``make_game`` then
``compile_game``, the same steps as ``tw-make custom``): ``world_size`` rooms,
``nb_objects`` objects, a quest of ``quest_length`` commands. Game seeds are drawn from the
caller's generator without replacement, and a seed whose game repeats an earlier one (same
world facts and walkthrough) is skipped, so no two rows, and no train and test row, share a
game. The compiled files go to ``OUT/games/tw-<seed>.z8`` (with the ``.json`` the game
needs at run time); a row holds the file's absolute path as ``game_file``.

Each row also carries ``seed``, ``objective``, ``walkthrough`` (the quest's winning
commands), ``question`` (the first observation the ``textworld`` workflow shows),
``compact_question`` (the same in its ``compact`` rendering) and an SFT target for a format
warm-up: ``response`` is the number of an admissible command drawn
uniformly at random, so the warm-up teaches how to answer, not which command wins.
"""

from __future__ import annotations

import random
from pathlib import Path

from trivium.envs.textworld_game import first_observation, start_game
from trivium.errors import UserError

GAMES_DIR = "games"
LARGEST_SEED = 2**31 - 1


def make_textworld_game(path: Path, seed: int, world_size: int, nb_objects: int, quest_length: int):
    """Generate the game of ``seed`` and compile it to ``path`` (a ``.z8`` file); returns the game."""
    from textworld import GameOptions
    from textworld.generator import compile_game, make_game

    options = GameOptions()
    options.seeds = seed
    options.nb_rooms = world_size
    options.nb_objects = nb_objects
    options.quest_length = quest_length
    options.path = str(path)
    options.force_recompile = True
    game = make_game(options)
    compile_game(game, options)
    return game


def game_signature(game) -> tuple:
    """What makes two generated games the same game: the world's facts and the walkthrough."""
    return tuple(sorted(map(str, game.world.facts))), tuple(game.metadata.get("walkthrough") or ())


def generate_textworld(
    count: int,
    rng: random.Random,
    out_dir: Path,
    world_size: int = 1,
    nb_objects: int = 2,
    quest_length: int = 1,
) -> list[dict]:
    """``count`` distinct compiled games in ``out_dir/games`` and their rows, in seed order drawn by ``rng``."""
    if world_size < 1 or nb_objects < 0 or quest_length < 1:
        raise UserError(
            "textworld needs --world-size >= 1, --nb-objects >= 0 and --quest-length >= 1, "
            f"got {world_size}, {nb_objects} and {quest_length}"
        )
    games_dir = Path(out_dir).resolve() / GAMES_DIR
    games_dir.mkdir(parents=True, exist_ok=True)
    rows, seen, tried = [], set(), set()
    while len(rows) < count:
        if len(tried) >= 4 * count + 20:
            raise UserError(
                f"only {len(rows)} distinct textworld games in {len(tried)} seeds; "
                "lower --num-train/--num-test or raise --world-size/--nb-objects/--quest-length"
            )
        seed = rng.randrange(1, LARGEST_SEED)
        if seed in tried:
            continue
        tried.add(seed)
        path = games_dir / f"tw-{seed}.z8"
        game = make_textworld_game(path, seed, world_size, nb_objects, quest_length)
        signature = game_signature(game)
        if signature in seen:
            for leftover in games_dir.glob(f"tw-{seed}.*"):
                leftover.unlink()
            continue
        seen.add(signature)
        env, state = start_game(str(path))
        env.close()
        rows.append(
            {
                "game_file": str(path),
                "seed": seed,
                "objective": state.objective.strip(),
                "walkthrough": list(game.metadata.get("walkthrough") or ()),
                "question": first_observation(state),
                "compact_question": first_observation(state, "compact"),
                "response": str(rng.randint(1, len(state.admissible_commands))),
            }
        )
    return rows
