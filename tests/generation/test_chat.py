from __future__ import annotations

import pytest
import torch

from genembed.generation.chat import chat_prompt_ids, eos_token_ids, validate_messages
from genembed.generation.decoding import decode_stream

PROMPT = "What is the capital of France?"


def _reference_text(backbone, prompt, n: int) -> str:
    ids = torch.tensor([chat_prompt_ids(backbone.tokenizer, prompt)])
    tokens = list(decode_stream(backbone.model, ids, max_new_tokens=n, eos_token_ids=eos_token_ids(backbone)))
    return backbone.tokenizer.decode(tokens, skip_special_tokens=True)


def test_chat_template_is_applied(tiny):
    ids = chat_prompt_ids(tiny.tokenizer, PROMPT)
    assert tiny.tokenizer.decode(ids) == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": PROMPT},
    ]
    text = tiny.tokenizer.decode(chat_prompt_ids(tiny.tokenizer, conversation))
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and text.endswith("<|im_start|>assistant\n")


def test_greedy_is_deterministic_and_matches_decoding(chatty_model):
    first = chatty_model.generate(PROMPT, max_new_tokens=20)
    assert first == chatty_model.generate(PROMPT, max_new_tokens=20)
    assert first == _reference_text(chatty_model.backbone, PROMPT, 20)
    assert len(first) > 10


def test_stream_joins_to_text(chatty_model):
    text = chatty_model.generate(PROMPT, max_new_tokens=30)
    pieces = list(chatty_model.generate(PROMPT, max_new_tokens=30, stream=True))
    assert len(pieces) > 3
    assert "".join(pieces) == text


def test_stop_strings_cut_the_reply(chatty_model):
    full = chatty_model.generate(PROMPT, max_new_tokens=40)
    stop = full[12:15]
    cut = full[: full.index(stop)]
    assert chatty_model.generate(PROMPT, max_new_tokens=40, stop=[stop, "\u2603never"]) == cut
    assert "".join(chatty_model.generate(PROMPT, max_new_tokens=40, stop=stop, stream=True)) == cut


def test_seeded_sampling(chatty_model):
    a = chatty_model.generate(PROMPT, max_new_tokens=20, temperature=1.0, seed=3)
    assert a == chatty_model.generate(PROMPT, max_new_tokens=20, temperature=1.0, seed=3)
    others = {chatty_model.generate(PROMPT, max_new_tokens=20, temperature=1.0, seed=s) for s in range(4, 8)}
    assert others - {a}


def test_max_new_tokens(chatty_model):
    short = chatty_model.generate(PROMPT, max_new_tokens=5)
    assert short == _reference_text(chatty_model.backbone, PROMPT, 5)
    longer = chatty_model.generate(PROMPT, max_new_tokens=20)
    assert longer.startswith(short) and len(longer) > len(short)
    assert chatty_model.generate(PROMPT, max_new_tokens=0) == ""


def test_eos_ends_the_reply(chatty_model):
    tok = chatty_model.backbone.tokenizer
    ids = torch.tensor([chat_prompt_ids(tok, PROMPT)])
    tokens = list(decode_stream(chatty_model.backbone.model, ids, max_new_tokens=10))
    chatty_model.backbone.model.generation_config.eos_token_id = tokens[4]
    assert chatty_model.generate(PROMPT, max_new_tokens=10) == tok.decode(tokens[: tokens.index(tokens[4])])


def test_bad_messages():
    with pytest.raises(ValueError, match=r"messages\[1\]\['role'\] must be one of"):
        validate_messages([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\] must be a string, got int"):
        validate_messages([{"role": "user", "content": 3}])
    with pytest.raises(TypeError, match="non-empty list"):
        validate_messages([])


def test_bad_settings_raise_before_streaming(chatty_model):
    with pytest.raises(ValueError, match="temperature"):
        chatty_model.generate(PROMPT, temperature=-1, stream=True)
    with pytest.raises(TypeError, match=r"stop\[0\] must be a string"):
        chatty_model.generate(PROMPT, stop=[1])


def test_prompt_longer_than_context(chatty_model):
    chatty_model.backbone.model.config.max_position_embeddings = 8
    with pytest.raises(ValueError, match="the model's context holds 8"):
        chatty_model.generate(PROMPT)
