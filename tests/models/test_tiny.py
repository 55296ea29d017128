import hashlib

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trivium.cli.main import main
from trivium.errors import UserError
from trivium.models.tiny import PRESETS, build_tiny_model, count_parameters
from trivium.models.tokenizer_builder import EOS_TOKEN, IM_END_TOKEN, IM_START_TOKEN, PAD_TOKEN


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", preset="tiny", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def model(tiny_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_dir)


def file_digests(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_tiny_model_loads_with_auto_classes_at_about_one_million_parameters(model, tokenizer):
    assert 0.5e6 < count_parameters(model) < 1.5e6
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tokenizer) < 512
    assert model.config.tie_word_embeddings


def test_special_tokens_and_ids_agree_between_tokenizer_and_model(model, tokenizer):
    ids = {
        token: tokenizer.convert_tokens_to_ids(token)
        for token in (PAD_TOKEN, EOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN)
    }
    assert len(set(ids.values())) == 4
    assert tokenizer.pad_token == PAD_TOKEN and tokenizer.eos_token == EOS_TOKEN
    assert model.config.pad_token_id == ids[PAD_TOKEN] == tokenizer.pad_token_id
    assert model.config.eos_token_id == ids[EOS_TOKEN] == tokenizer.eos_token_id
    assert model.config.bos_token_id == ids[EOS_TOKEN]
    assert model.generation_config.eos_token_id == [ids[IM_END_TOKEN], ids[EOS_TOKEN]]
    assert model.generation_config.pad_token_id == ids[PAD_TOKEN]


@pytest.mark.parametrize("number", ["0", "7", "82", "12345", "9081726354"])
def test_every_digit_is_its_own_token(tokenizer, number):
    for text in (number, f"What is {number} + 1?", f"<answer>{number}</answer>", f"x{number}y"):
        pieces = [tokenizer.decode([token]) for token in tokenizer.encode(text)]
        digit_pieces = [piece for piece in pieces if any(char.isdigit() for char in piece)]
        assert digit_pieces == list(number if not text.endswith("+ 1?") else number + "1")


@pytest.mark.parametrize(
    "text",
    [
        "What is 47 + 35?",
        "  spaces\tand\nnewlines  ",
        "héllo wörld ✓ 日本語 🙂",
        "<answer>(3 + 5) * 2</answer>",
        "~!@#$%^&*()",
    ],
)
def test_any_text_round_trips(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_chat_template_renders_turns_and_marks_assistant_tokens(tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "What is 1 + 2?"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    full = messages + [{"role": "assistant", "content": "<answer>3</answer>"}]
    encoded = tokenizer.apply_chat_template(
        full, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assistant_ids = [token for token, mask in zip(encoded["input_ids"], encoded["assistant_masks"]) if mask]
    assert tokenizer.decode(assistant_ids) == "<answer>3</answer><|im_end|>"


def test_generation_runs_and_stops_within_budget(model, tokenizer):
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 1 + 2?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    output = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    assert (
        output.shape[0] == 1
        and inputs["input_ids"].shape[1] < output.shape[1] <= inputs["input_ids"].shape[1] + 6
    )


def test_same_seed_gives_identical_files_and_other_seed_other_weights(tiny_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", preset="tiny", seed=0)
    other = build_tiny_model(tmp_path / "other", preset="tiny", seed=1)
    assert file_digests(again) == file_digests(tiny_dir)
    assert file_digests(other)["model.safetensors"] != file_digests(tiny_dir)["model.safetensors"]


def test_building_does_not_disturb_the_callers_random_state(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", seed=4)
    assert torch.equal(torch.rand(3), expected)


def test_small_preset_has_five_to_ten_million_parameters(tmp_path):
    directory = build_tiny_model(tmp_path / "small", preset="small", seed=0)
    assert 5e6 <= count_parameters(AutoModelForCausalLM.from_pretrained(directory)) <= 10e6
    assert set(PRESETS) == {"tiny", "small", "medium"}


def test_medium_preset_has_about_twenty_five_million_parameters():
    from transformers import LlamaForCausalLM

    from trivium.models.tiny import model_config

    spec = PRESETS["medium"]
    model = LlamaForCausalLM(model_config(spec, vocab_size=spec.max_vocab_size, pad_id=0, eos_id=1))
    assert 20e6 < count_parameters(model) < 30e6


def test_bad_preset_and_non_empty_out_are_user_errors(tiny_dir, tmp_path):
    with pytest.raises(UserError, match="tiny, small"):
        build_tiny_model(tmp_path / "x", preset="huge")
    with pytest.raises(UserError, match="not empty"):
        build_tiny_model(tiny_dir)


def test_cli_init_model(tmp_path, capsys):
    assert main(["init", "model", "--preset", "tiny", "--out", str(tmp_path / "m"), "--seed", "2"]) == 0
    assert "wrote tiny model" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path / "m").chat_template


@pytest.mark.slow
def test_tiny_model_fits_arithmetic_answers_quickly(model, tokenizer):
    """Supervised steps on generated rows cut the answer-token loss sharply: model, tokenizer,
    chat template and data fit together."""
    import copy
    import random

    from trivium.data.arithmetic import generate_arithmetic

    rows = generate_arithmetic(16, random.Random(0))
    encoded = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": row["question"]}, {"role": "assistant", "content": row["response"]}],
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        for row in rows
    ]
    length = max(len(item["input_ids"]) for item in encoded)
    input_ids = torch.full((len(rows), length), tokenizer.pad_token_id)
    attention = torch.zeros(len(rows), length, dtype=torch.long)
    answer_mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for row_index, item in enumerate(encoded):
        size = len(item["input_ids"])
        input_ids[row_index, :size] = torch.tensor(item["input_ids"])
        attention[row_index, :size] = 1
        answer_mask[row_index, :size] = torch.tensor(item["assistant_masks"], dtype=torch.bool)

    trainable = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(trainable.parameters(), lr=3e-3)

    def answer_loss():
        logits = trainable(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        targets, mask = input_ids[:, 1:], answer_mask[:, 1:]
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        return (per_token * mask).sum() / mask.sum()

    torch.manual_seed(0)
    losses = []
    for _ in range(20):
        loss = answer_loss()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # Random init starts near log(vocab) ~ 6 nats; the answer template is learned fast.
    assert losses[0] > 4.0
    assert losses[-1] < 0.3 * losses[0]
