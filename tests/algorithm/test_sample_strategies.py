"""Sample strategies are declared once, with the traits the config rules and the runtime ask."""

from trivium.algorithm.sample_strategies import SAMPLE_STRATEGIES, sample_strategy
from trivium.config.schema import AlgorithmConfig, field_choices


def test_each_strategy_declares_its_arguments_and_traits():
    assert sample_strategy(None) is SAMPLE_STRATEGIES["default"]
    assert sample_strategy("staleness_control").controls_staleness
    assert sample_strategy("staleness_control").defaults == {"max_staleness": 1, "mode": "drop"}
    assert sample_strategy("mix").mixes_expert_data and sample_strategy("mix").defaults == {
        "expert_data_ratio": 0.25
    }
    default = sample_strategy("default")
    assert not (default.controls_staleness or default.mixes_expert_data or default.defaults)


def test_the_schema_offers_the_declared_strategies_and_the_reference_spelling():
    assert field_choices(AlgorithmConfig, "sample_strategy") == [*SAMPLE_STRATEGIES, "warmup"]
