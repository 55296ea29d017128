"""`trivium plan` over the example configurations that ship with Trinity-RFT.

The examples live outside the project, in ``../shared/reference-configs/examples`` next to
the repository (or where ``TRIVIUM_REFERENCE_EXAMPLES`` points); without them the test is
skipped. Each example must plan cleanly, or stop with one clear error that names what it
needs (an outside package, a GPU-only transport, images); never a traceback, an unknown
key, or an unknown algorithm, workflow or reward name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from trivium.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = Path(os.environ.get("TRIVIUM_REFERENCE_EXAMPLES", REPO_ROOT.parent / "shared" / "reference-configs" / "examples"))

# Values for the environment variables the examples read (${oc.env:...} without defaults).
ENVIRONMENT = {
    "TRINITY_CHECKPOINT_ROOT_DIR": "checkpoints",
    "TRINITY_MODEL_PATH": "models/policy",
    "TRINITY_TASKSET_PATH": "data/taskset",
    "TRINITY_SFT_DATASET_PATH": "data/sft",
    "TRINITY_AUX_MODEL_PATH": "models/auxiliary",
    "TRINITY_BUFFER_PATH": "data/buffer",
}

# Examples that cannot run here, and the words their one error must contain.
NEEDS = {
    "RAFT_alfworld/RAFT_alfworld_7B.yaml": "'alfworld'",
    "RAFT_alfworld/RAFT_reflect_alfworld_7B.yaml": "'alfworld'",
    "grpo_alfworld/alfworld.yaml": "'alfworld'",
    "grpo_sciworld/sciworld.yaml": "'scienceworld'",
    "grpo_webshop/webshop.yaml": "'web_agent_site'",
    "grpo_vlm/vlm.yaml": "multimodal inputs are not supported",
    "mix_vlm/mix_vlm.yaml": "multimodal inputs are not supported",
    "grpo_math/math.yaml": "'rm_gallery'",
    "grpo_alfworld_general_multi_step/alfworld.yaml": "'alfworld'",
    "agentscope_react/gsm8k.yaml": "'agentscope'",
    "agentscope_tool_react/agentscopev0_tool_react_dapo.yaml": "'agentscope'",
    "agentscope_tool_react/agentscopev0_tool_react_gsm8k.yaml": "'agentscope'",
    "agentscope_tool_react/agentscopev1_tool_react_dapo.yaml": "'agentscope'",
    "agentscope_websearch/agentscopev1_websearch_agent.yaml": "'agentscope'",
    "grpo_email_search/email_search.yaml": "'agentscope'",
    # A Data-Juicer operator that waits for people to annotate in a Label Studio server.
    "dpo_human_in_the_loop/dpo.yaml": "'human_preference_annotation_mapper' cannot run here",
    # User code of the reference repository's examples folder, absent here.
    "agentscope_frozenlake/frozenlake_agent.yaml": "No module named 'examples",
    "bots/random.yaml": "No module named 'examples",
    "bots/bots.yaml": "No module named 'examples",
    "learn_to_ask/train.yaml": "No module named 'examples",
}

# Examples that split each sequence over several GPUs (trainer.ulysses_sequence_parallel_size: 2),
# which the trainer does not implement: refused by `trivium plan` as by `trivium run`, beside what
# they need above.
SEQUENCE_PARALLEL = "trainer.ulysses_sequence_parallel_size: sequence parallelism"
for _example in ("grpo_toolcall/toolace.yaml", "mix_chord/mix_chord.yaml", "mix_chord/mix_chord_toolace.yaml",
                 "agentscope_frozenlake/frozenlake_agent.yaml", "agentscope_react/gsm8k.yaml",
                 "agentscope_tool_react/agentscopev0_tool_react_dapo.yaml",
                 "agentscope_tool_react/agentscopev0_tool_react_gsm8k.yaml",
                 "agentscope_tool_react/agentscopev1_tool_react_dapo.yaml",
                 "agentscope_websearch/agentscopev1_websearch_agent.yaml"):
    NEEDS[_example] = (*((NEEDS[_example],) if _example in NEEDS else ()), SEQUENCE_PARALLEL)

# Examples that need parts not built yet; strict, so each is noticed when it starts to pass.
NOT_YET: dict[str, list[str]] = {}
NOT_YET_REASON = {name: reason for reason, names in NOT_YET.items() for name in names}


def example_configs() -> list[str]:
    if not EXAMPLES.is_dir():
        return []
    configs = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        # Data-Juicer recipes (`process:` lists) sit next to some examples; they are not run configs.
        if isinstance(data, dict) and "process" not in data:
            configs.append(str(path.relative_to(EXAMPLES)))
    return configs


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"the reference examples are not at {EXAMPLES}")
def test_the_reference_examples_are_all_there():
    assert len(example_configs()) == 54


def example_params() -> list:
    params = []
    for example in example_configs() or ["(none)"]:
        marks = ()
        if example in NOT_YET_REASON:
            marks = pytest.mark.xfail(strict=True, reason=f"needs {NOT_YET_REASON[example]}")
        params.append(pytest.param(example, marks=marks))
    return params


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"the reference examples are not at {EXAMPLES}")
@pytest.mark.parametrize("example", example_params())
def test_plan_handles_a_reference_example(example, monkeypatch, capsys, tmp_path):
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, str(tmp_path / value))
    code = main(["plan", "--config", str(EXAMPLES / example)])
    output = capsys.readouterr()
    errors = [line for line in output.err.splitlines() if line.startswith("error")]
    assert "Traceback" not in output.out + output.err
    for forbidden in ("unknown key", "Unknown workflow", "Unknown reward", "invalid value 'multi_step_grpo'"):
        assert forbidden not in output.err, output.err
    if example in NEEDS:
        needs = NEEDS[example] if isinstance(NEEDS[example], tuple) else (NEEDS[example],)
        assert code != 0 and len(errors) == 1, output.err
        assert all(words in output.err for words in needs), output.err
        assert (f"({len(needs)} problems)" in output.err) == (len(needs) > 1), output.err
    else:
        assert code == 0, output.err
        assert "devices" in output.out.lower() or "gpu" in output.out.lower(), output.out
