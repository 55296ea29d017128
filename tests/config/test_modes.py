"""Each mode rule is a trait of ModeTraits; these pin which modes have which trait."""

from __future__ import annotations

import pytest

from trivium.config.modes import MODE_TRAITS


def modes_with(trait: str) -> set[str]:
    return {mode for mode, traits in MODE_TRAITS.items() if getattr(traits, trait)}


@pytest.mark.parametrize(
    ("trait", "modes"),
    [
        ("takes_turns", {"colocate"}),
        ("evaluates_only", {"bench"}),
        ("one_side", {"train", "explore", "bench"}),  # weights travel as checkpoints
        ("explores_only", {"explore", "bench"}),
        ("trains_only", {"train"}),
        ("trains_what_it_explores", {"both", "colocate"}),
        ("reads_training_tasksets", {"both", "colocate", "explore"}),
    ],
)
def test_each_trait_holds_for_exactly_its_modes(trait, modes):
    assert modes_with(trait) == modes


def test_a_mode_that_only_evaluates_explores_and_trains_nothing():
    for mode in modes_with("evaluates_only"):
        assert MODE_TRAITS[mode].explores and not MODE_TRAITS[mode].trains and not MODE_TRAITS[mode].resumes
