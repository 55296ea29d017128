"""A settings dataclass passed on as keyword arguments: every field but those left out, and a
left-out name that is no field is refused (a typo would otherwise pass a setting on silently)."""

from dataclasses import dataclass

import pytest

from trivium.core.keyword_fields import keyword_fields


@dataclass(frozen=True)
class Adapter:
    rank: int = 8
    seed: int | None = None
    request_timeout: float = 30.0


def test_every_field_by_its_own_name_but_those_left_out():
    assert keyword_fields(Adapter(rank=4)) == {"rank": 4, "seed": None, "request_timeout": 30.0}
    assert keyword_fields(Adapter(seed=3), leave_out=("request_timeout",)) == {"rank": 8, "seed": 3}


def test_leaving_out_a_name_that_is_no_field_is_refused():
    with pytest.raises(ValueError, match="Adapter has no field request_timout"):
        keyword_fields(Adapter(), leave_out=("request_timout",))
