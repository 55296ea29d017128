"""Keyword arguments declared once for several algorithm functions (``with_shared_args``)."""

import pytest

from trivium.algorithm.arguments import check_fn_args, tunable_args, with_shared_args
from trivium.algorithm.chord import mix_chord_loss
from trivium.algorithm.supervised_losses import MIX_PART_ARGS, mix_policy_loss
from trivium.errors import UserError


def test_shared_args_reach_the_function_with_their_defaults_and_show_in_its_signature():
    @with_shared_args({"scale": 2.0, "shift": 0})
    def affine(*, x: float, bias: float = 1.0, **kwargs):
        return x * kwargs["scale"] + kwargs["shift"] + bias

    assert affine(x=3.0) == 7.0  # 3 * 2 + 0 + 1
    assert affine(x=3.0, shift=5) == 12.0
    assert tunable_args(affine) == {"bias": 1.0, "scale": 2.0, "shift": 0}
    with pytest.raises(UserError, match="unknown argument 'scael'.*Did you mean 'scale'"):
        check_fn_args(affine, {"scael": 1}, key="algorithm.policy_loss_fn_args")


def test_a_function_without_a_keyword_catch_all_is_refused():
    with pytest.raises(TypeError, match="must take \\*\\*kwargs"):
        with_shared_args({"scale": 2.0})(lambda *, x: x)


@pytest.mark.parametrize("loss", [mix_policy_loss, mix_chord_loss])
def test_both_mix_losses_take_every_part_argument(loss):
    assert {name: tunable_args(loss)[name] for name in MIX_PART_ARGS} == MIX_PART_ARGS
