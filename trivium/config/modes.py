"""What each ``mode`` runs: the one definition of which modes explore, which train, and how.

Every rule that depends on the mode asks these traits instead of listing mode names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModeTraits:
    explores: bool  # runs rollout engines (workflows, an evaluation, or the served API)
    trains: bool  # runs the trainer
    reads_training_tasksets: bool  # needs buffer.explorer_input.tasksets
    concurrent: bool  # explorer and trainer run at the same time
    resumes: bool = True  # continue_from_checkpoint picks up the run directory's state
    serves_api: bool = False  # explores by serving the policy over HTTP to outside applications
    takes_turns: bool = False  # explorer and trainer take turns on one device, in one process
    evaluates_only: bool = False  # evaluates models on the eval tasksets; nothing is trained or synced

    @property
    def one_side(self) -> bool:
        """Runs the explorer or the trainer, not both: the other side, if any, is another run
        in another process, so weights travel between them as checkpoints."""
        return self.explores != self.trains

    @property
    def explores_only(self) -> bool:
        return self.explores and not self.trains

    @property
    def trains_only(self) -> bool:
        """Trains without exploring: on a dataset, or on experiences another run wrote."""
        return self.trains and not self.explores

    @property
    def trains_what_it_explores(self) -> bool:
        """The trainer learns from the experiences this run's explorer makes from its tasksets."""
        return self.trains and self.reads_training_tasksets


MODE_TRAITS: dict[str, ModeTraits] = {
    "both": ModeTraits(explores=True, trains=True, reads_training_tasksets=True, concurrent=True),
    "train": ModeTraits(explores=False, trains=True, reads_training_tasksets=False, concurrent=False),
    "explore": ModeTraits(explores=True, trains=False, reads_training_tasksets=True, concurrent=False),
    "bench": ModeTraits(
        explores=True,
        trains=False,
        reads_training_tasksets=False,
        concurrent=False,
        resumes=False,
        evaluates_only=True,
    ),
    "colocate": ModeTraits(
        explores=True, trains=True, reads_training_tasksets=True, concurrent=False, takes_turns=True
    ),
    "serve": ModeTraits(
        explores=True, trains=True, reads_training_tasksets=False, concurrent=True, serves_api=True
    ),
}

EXPLORING_MODES = tuple(mode for mode, traits in MODE_TRAITS.items() if traits.explores)
TRAINING_MODES = tuple(mode for mode, traits in MODE_TRAITS.items() if traits.trains)


def traits_of(mode: str) -> ModeTraits:
    return MODE_TRAITS[mode]
