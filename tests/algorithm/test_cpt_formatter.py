"""cpt: raw text rows become experiences trained on every token, without a chat template."""

import pytest
from transformers import AutoTokenizer

from trivium.algorithm import PRESETS
from trivium.buffer.formatters import DPOFormatter, SFTFormatter
from trivium.errors import UserError


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_a_raw_row_is_bos_text_eos_with_every_token_after_the_first_trained(tokenizer):
    formatter = SFTFormatter(tokenizer, {"prompt_type": "raw", "prompt_key": "text"})
    experience = formatter.format({"text": "12 + 7 = 19"})
    text_ids = tokenizer.encode("12 + 7 = 19", add_special_tokens=False)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    assert experience.tokens.tolist() == bos + text_ids + eos
    assert experience.prompt_length == 1
    assert experience.action_mask.all() and len(experience.action_mask) == len(experience.tokens) - 1
    assert (
        tokenizer.decode(experience.tokens.tolist(), skip_special_tokens=True).replace(" ", "") == "12+7=19"
    )


def test_raw_rows_need_text_and_do_not_make_dpo_pairs(tokenizer):
    formatter = SFTFormatter(tokenizer, {"prompt_type": "raw", "prompt_key": "text"})
    with pytest.raises(UserError, match="text"):
        formatter.format({"other": "x"})
    with pytest.raises(UserError, match="non-empty"):
        formatter.format({"text": "   "})
    with pytest.raises(UserError, match="raw"):
        DPOFormatter(tokenizer, {"prompt_type": "raw"}).format_pair({"prompt": "a"}, group_id="g")


def test_the_cpt_preset_is_the_sft_loss_on_a_dataset():
    preset = PRESETS["cpt"]
    assert (preset.advantage_fn, preset.policy_loss_fn, preset.kl_loss_fn) == ("none", "sft", "none")
    assert preset.train_only


def test_cpt_and_m2po_configs_name_the_key_they_need(tmp_path):
    from trivium.config.load import load_config_from_dict
    from trivium.config.resolve import resolve
    from trivium.config.validate import validate

    def load_config(data):
        validate(resolve(load_config_from_dict(data)))

    base = {
        "mode": "train",
        "model": {"model_path": "models/policy", "max_prompt_tokens": 16, "max_response_tokens": 16},
        "buffer": {
            "total_steps": 1,
            "train_batch_size": 2,
            "trainer_input": {
                "experience_buffer": {"name": "corpus", "storage_type": "file", "path": str(tmp_path)}
            },
        },
    }
    cpt = {**base, "algorithm": {"algorithm_type": "cpt"}}
    with pytest.raises(UserError, match="prompt_type: raw"):
        load_config(cpt)
    m2po = {
        **base,
        "mode": "colocate",
        "algorithm": {"algorithm_type": "m2po", "repeat_times": 2, "loss_agg_mode": "seq-mean-token-mean"},
    }
    with pytest.raises(UserError, match="loss_agg_mode"):
        load_config(m2po)
