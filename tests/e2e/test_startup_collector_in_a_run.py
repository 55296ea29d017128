"""A run's rollouts happen with the garbage collector on: the start-up pause
(trivium/runtime/startup_collector.py) ends once the components are built."""

import gc
import textwrap

import pytest

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

# The reward is 1 when the collector is on while the reply is scored, else 0.
COLLECTOR_REWARD = textwrap.dedent(
    """
    import gc

    from trivium.rewards import REWARD_FNS

    @REWARD_FNS.register("collector_on")
    def collector_on(*, prompt, response, ground_truth, **kwargs):
        return float(gc.isenabled())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["colocate", "both"])
def test_rollouts_run_with_the_collector_on_and_start_up_frozen(assets, tmp_path, mode):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "collector_on.py").write_text(COLLECTOR_REWARD)
    config = base_config(assets, tmp_path / "runs", mode=mode)
    config["buffer"]["explorer_input"]["default_reward_fn_type"] = "collector_on"
    frozen = gc.get_freeze_count()
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0
    rewards = [r["rollout/reward_mean"] for r in read_metrics(tmp_path / "runs" / "e2e" / "run")
               if "rollout/reward_mean" in r]
    assert rewards == [1.0, 1.0]
    assert gc.isenabled()
    assert gc.get_freeze_count() > frozen  # what start-up made was moved out of the collector's way
