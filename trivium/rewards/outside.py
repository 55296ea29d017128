"""Reward functions of Trinity-RFT that call an outside package.

``rm_gallery_reward`` names a reward model from the RM-Gallery package. The bridge to
RM-Gallery is not built: the name resolves so that a configuration naming it gets a clear
refusal from `trivium plan` (the missing package first, then ``unsupported``), never a run
that stops at its first reward. Calling it directly raises the same message.
"""

from __future__ import annotations

from typing import Any

from trivium.errors import UserError
from trivium.registry import missing_package_message
from trivium.rewards.registry import REWARD_FNS


def rm_gallery_reward(*, prompt: str, response: str, ground_truth: Any, **kwargs: Any) -> float:
    """A reward from an RM-Gallery reward model (needs the ``rm_gallery`` package)."""
    raise UserError(missing_package_message(rm_gallery_reward) or rm_gallery_reward.unsupported)


rm_gallery_reward.environment = "RM-Gallery reward models"
rm_gallery_reward.required_package = "rm_gallery"
rm_gallery_reward.install_hint = "pip install rm-gallery"
rm_gallery_reward.unsupported = (
    "rm_gallery_reward: the bridge to RM-Gallery reward models is not built in trivium; register your own "
    "reward function (--plugin-dir) that calls the reward model"
)
REWARD_FNS.register("rm_gallery_reward", rm_gallery_reward)
