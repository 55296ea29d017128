"""What each ``mode`` runs: the one definition of which modes explore and which train.

Every rule that depends on the mode asks these traits instead of listing mode names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModeTraits:
    explores: bool  # runs rollout engines and workflows
    trains: bool  # runs the trainer
    reads_training_tasksets: bool  # needs buffer.explorer_input.tasksets
    concurrent: bool  # explorer and trainer run at the same time
    resumes: bool = True  # continue_from_checkpoint picks up the run directory's state
    serves_api: bool = False  # explores by serving the policy over HTTP to outside applications


MODE_TRAITS: dict[str, ModeTraits] = {
    "colocate": ModeTraits(explores=True, trains=True, reads_training_tasksets=True, concurrent=False),
    "both": ModeTraits(explores=True, trains=True, reads_training_tasksets=True, concurrent=True),
    "train": ModeTraits(explores=False, trains=True, reads_training_tasksets=False, concurrent=False),
    "explore": ModeTraits(explores=True, trains=False, reads_training_tasksets=True, concurrent=False),
    "bench": ModeTraits(explores=True, trains=False, reads_training_tasksets=False, concurrent=False, resumes=False),
    "serve": ModeTraits(explores=True, trains=True, reads_training_tasksets=False, concurrent=True, serves_api=True),
}

EXPLORING_MODES = tuple(mode for mode, traits in MODE_TRAITS.items() if traits.explores)
TRAINING_MODES = tuple(mode for mode, traits in MODE_TRAITS.items() if traits.trains)


def traits_of(mode: str) -> ModeTraits:
    return MODE_TRAITS[mode]
