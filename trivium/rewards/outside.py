"""Reward functions of Trinity-RFT that call an outside package.

``rm_gallery_reward`` scores with a reward model from the RM-Gallery package. Its name
resolves; the configuration rules report the missing package before a run starts, and the
function repeats the message if called anyway. With the package installed, the call raises
NotImplementedError: the bridge to RM-Gallery is not built.
"""

from __future__ import annotations

from typing import Any

from trivium.errors import UserError
from trivium.rewards.registry import REWARD_FNS


def rm_gallery_reward(*, prompt: str, response: str, ground_truth: Any, **kwargs: Any) -> float:
    """A reward from an RM-Gallery reward model (needs the ``rm_gallery`` package)."""
    from trivium.workflows.environments import missing_package_message

    missing = missing_package_message(rm_gallery_reward)
    if missing:
        raise UserError(missing)
    raise NotImplementedError("the RM-Gallery bridge is not built in trivium; register your own reward function")


rm_gallery_reward.environment = "RM-Gallery reward models"
rm_gallery_reward.required_package = "rm_gallery"
rm_gallery_reward.install_hint = "pip install rm-gallery"
REWARD_FNS.register("rm_gallery_reward", rm_gallery_reward)
