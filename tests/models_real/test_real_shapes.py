"""Real-shape presets: the public models' architectures, and a tokenizer at their vocabulary size."""

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from trivium.cli.init import REAL_SHAPE_PRESETS
from trivium.cli.main import main
from trivium.errors import UserError
from trivium.models.real_shapes import REAL_SHAPES, build_real_shape_model, real_shape_config
from trivium.models.real_vocab_tokenizer import RESERVED_TOKEN, SPECIAL_TOKENS, TAG_TOKENS

from .conftest import PRESETS

# The public models' parameter counts (tied embeddings counted once), as their model cards give them.
PUBLIC_PARAMETERS = {"qwen2.5-0.5b": 494_032_768, "qwen3-0.6b": 596_049_920, "llama3.2-1b": 1_235_814_400}


def test_the_command_line_offers_every_real_shape_preset():
    assert set(REAL_SHAPE_PRESETS) == set(REAL_SHAPES) == set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_full_depth_presets_have_the_public_parameter_count(preset):
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(real_shape_config(preset))
    assert sum(p.numel() for p in model.parameters()) == PUBLIC_PARAMETERS[preset]


def test_architecture_details_of_each_family(real_model_dirs):
    qwen2 = AutoConfig.from_pretrained(real_model_dirs["qwen2.5-0.5b"])
    qwen3 = AutoConfig.from_pretrained(real_model_dirs["qwen3-0.6b"])
    llama = AutoConfig.from_pretrained(real_model_dirs["llama3.2-1b"])
    assert (qwen2.model_type, qwen2.num_hidden_layers, qwen2.hidden_size, qwen2.num_attention_heads) == ("qwen2", 1, 896, 14)
    assert qwen2.rope_parameters["rope_theta"] == 1e6 and qwen2.max_position_embeddings == 32768
    assert (qwen3.model_type, qwen3.head_dim, qwen3.num_key_value_heads, qwen3.intermediate_size) == ("qwen3", 128, 8, 3072)
    assert qwen3.max_position_embeddings == 40960 and qwen3.rms_norm_eps == 1e-6
    assert llama.rms_norm_eps == 1e-5 and llama.max_position_embeddings == 131072
    assert llama.rope_parameters == {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    }
    assert all(config.tie_word_embeddings for config in (qwen2, qwen3, llama))
    weights = {preset: _weight_shapes(real_model_dirs[preset]) for preset in PRESETS}
    assert weights["qwen2.5-0.5b"]["model.layers.0.self_attn.q_proj.bias"] == [896]  # Qwen2: q/k/v biases
    assert weights["qwen3-0.6b"]["model.layers.0.self_attn.q_norm.weight"] == [128]  # Qwen3: per-head q/k norms
    assert weights["qwen3-0.6b"]["model.layers.0.self_attn.q_proj.weight"] == [16 * 128, 1024]
    assert weights["llama3.2-1b"]["model.embed_tokens.weight"] == [128256, 2048]
    assert not any("q_norm" in name or name.endswith(".bias") for name in weights["llama3.2-1b"])
    assert all("lm_head.weight" not in shapes for shapes in weights.values()), "tied: saved once"


def _weight_shapes(model_dir: str) -> dict[str, list[int]]:
    from safetensors import safe_open

    with safe_open(str(Path(model_dir) / "model.safetensors"), "pt") as handle:
        names = handle.keys()  # a safetensors handle is not iterable
        return {name: list(handle.get_slice(name).get_shape()) for name in names}


@pytest.mark.parametrize("preset", PRESETS)
def test_auto_tokenizer_loads_exactly_the_trained_tokenizer(real_model_dirs, preset):
    model_dir = real_model_dirs[preset]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if preset.startswith("qwen2.5"):  # transformers swaps in its own class for qwen2 ...
        assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    # ... and every part of the backend still equals the trained one written to tokenizer.json.
    trained = json.loads(Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json")).to_str())
    assert json.loads(tokenizer.backend_tokenizer.to_str()) == trained
    vocab_size = REAL_SHAPES[preset].vocab_size
    assert len(tokenizer) == vocab_size == AutoConfig.from_pretrained(model_dir).vocab_size


def test_tokenizer_ids_special_tokens_and_reserved_padding(qwen3_tokenizer, qwen3_dir):
    tokenizer = qwen3_tokenizer
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + TAG_TOKENS] == list(range(9))
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    last = len(tokenizer) - 1
    reserved = tokenizer.convert_ids_to_tokens(last)
    assert reserved.startswith("<|reserved_special_token_")
    text = f"{reserved} {RESERVED_TOKEN.format(0)} What is 47 + 35? héllo ✓ 日本"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert max(ids) < tokenizer.convert_tokens_to_ids(RESERVED_TOKEN.format(0)), "text never encodes to reserved ids"
    digits = [tokenizer.decode([i]) for i in tokenizer.encode("12345", add_special_tokens=False)]
    assert digits == ["1", "2", "3", "4", "5"]
    # The tags stay in decoded replies (the parsers read them); chat tokens do not.
    reply = tokenizer.encode('<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>', add_special_tokens=False)
    assert tokenizer.decode(reply, skip_special_tokens=True) == '<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call>'
    generation = json.loads((Path(qwen3_dir) / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, 0] and generation["pad_token_id"] == 0


def test_depth_outside_the_public_model_and_layers_on_tiny_presets_are_refused(tmp_path, capsys):
    with pytest.raises(UserError, match="--layers 29 is out of range for qwen3-0.6b: give 1 to 28"):
        build_real_shape_model(tmp_path / "deep", "qwen3-0.6b", layers=29)
    assert main(["init", "model", "--preset", "tiny", "--layers", "2", "--out", str(tmp_path / "tiny")]) != 0
    assert "--layers applies to the real-shape presets" in capsys.readouterr().err
    assert not (tmp_path / "tiny").exists()


def test_random_weights_follow_transformers_init_rules_and_the_seed():
    from transformers import Qwen2Config

    from trivium.models.real_shapes import random_model

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=3, tie_word_embeddings=True)
    first, again, other = random_model(config, 0), random_model(config, 0), random_model(config, 1)
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name
        if name.endswith("norm.weight"):
            assert torch.all(tensor == 1), name
        elif name.endswith(".bias"):
            assert torch.all(tensor == 0), name
        else:
            assert not torch.equal(tensor, other.state_dict()[name]), name
            assert 0.01 < float(tensor.float().std()) < 0.03, name
    embedding = first.get_input_embeddings().weight
    assert torch.all(embedding[3] == 0) and first.lm_head.weight is embedding
