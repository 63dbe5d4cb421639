from __future__ import annotations

import pytest

from genembed.encoders import collate, encode_prompts, prompt_spans


def test_plain_format_matches_instruction_newline_text(tiny):
    tok = tiny.tokenizer
    (p,) = encode_prompts(tok, ["the text"], instruction="Do this.", prompt_format="plain")
    assert tok.decode(p.ids) == "Do this.\nthe text"
    assert tok.decode(p.ids[p.text_start : p.text_end]) == "the text"
    (q,) = encode_prompts(tok, ["the text"], instruction="", prompt_format="plain")
    assert tok.decode(q.ids) == "the text" and (q.text_start, q.text_end) == (0, len(q.ids))


def test_chat_format_uses_the_template_and_ends_with_generation_prompt(tiny):
    prefix, suffix = prompt_spans(tiny.tokenizer, "Find the intent.", "chat")
    assert prefix == "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nFind the intent.\n"
    assert suffix == "<|im_end|>\n<|im_start|>assistant\n"
    (p,) = encode_prompts(tiny.tokenizer, ["card lost"], instruction="Find the intent.", prompt_format="chat")
    assert tiny.tokenizer.decode(p.ids[p.text_start : p.text_end]) == "card lost"


def test_truncation_keeps_instruction_and_template(tiny):
    long_text = "word " * 500
    (p,) = encode_prompts(tiny.tokenizer, [long_text], instruction="Keep me.", prompt_format="chat", max_length=40)
    assert len(p.ids) == 40
    assert tiny.tokenizer.decode(p.ids).endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "Keep me." in tiny.tokenizer.decode(p.ids)


def test_max_length_too_small_for_template(tiny):
    with pytest.raises(ValueError, match="leaves no room"):
        encode_prompts(tiny.tokenizer, ["x"], instruction="A long instruction here", prompt_format="chat", max_length=3)


def test_unknown_format(tiny):
    with pytest.raises(ValueError, match="prompt format must be one of"):
        encode_prompts(tiny.tokenizer, ["x"], prompt_format="fancy")


def test_collate_left_pads_and_marks_text(tiny):
    prompts = encode_prompts(tiny.tokenizer, ["a", "a longer text"], instruction="I.", prompt_format="plain")
    batch = collate(prompts, pad_id=tiny.tokenizer.pad_token_id)
    short, long_ = prompts
    width = len(long_.ids)
    assert batch.input_ids.shape == (2, width)
    pad = width - len(short.ids)
    assert batch.attention_mask[0].tolist() == [0] * pad + [1] * len(short.ids)
    assert batch.text_mask[0].sum() == short.text_end - short.text_start
    assert batch.text_mask[0, : pad + short.text_start].sum() == 0


def test_split_around_renders_a_user_turn_or_the_plain_ending(tiny):
    from genembed.encoders.prompts import SENTINEL, split_around

    before, after = split_around(tiny.tokenizer, f"Doc: {SENTINEL} end")
    assert before == "<|im_start|>user\nDoc: " and after == " end<|im_end|>\n<|im_start|>assistant\n"
    before, _ = split_around(tiny.tokenizer, f"Doc: {SENTINEL}", system_turn=True)
    assert before == "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nDoc: "

    class NoTemplate:
        chat_template = None

    assert split_around(NoTemplate(), f"Q: {SENTINEL}!", plain_end="\nA:") == ("Q: ", "!\nA:")
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        split_around(NoTemplate(), SENTINEL)


def test_gircse_format_is_the_official_string_tokenized_whole(tiny):
    tok = tiny.tokenizer
    (p, empty) = encode_prompts(tok, ["the text", ""], instruction="Do this.", prompt_format="gircse")
    whole = tok("Instruct: Do this.\nQuery:the text", add_special_tokens=False)["input_ids"]
    assert p.ids == whole  # one string, no space after "Query:", no special tokens
    assert tok.decode(p.ids[p.text_start : p.text_end]) == "the text"
    assert (empty.text_start, empty.text_end) == (len(empty.ids), len(empty.ids))  # pooled over the prompt
    (bare,) = encode_prompts(tok, ["the text"], instruction="", prompt_format="gircse")
    assert bare.ids == tok("the text", add_special_tokens=False)["input_ids"] and bare.text_start == 0


def test_gircse_text_span_follows_offsets_when_the_boundary_merges(tiny):
    # "Query:" + ":x" tokenizes differently whole than split; the span must still start inside the text
    tok = tiny.tokenizer
    (p,) = encode_prompts(tok, [":: x"], instruction="I.", prompt_format="gircse")
    assert p.ids == tok("Instruct: I.\nQuery::: x", add_special_tokens=False)["input_ids"]
    assert tok.decode(p.ids[p.text_start :]).endswith(":: x")


def test_gritlm_format_masks_what_gritlm_masks(tiny):
    tok = tiny.tokenizer
    (p,) = encode_prompts(tok, ["the text"], instruction="Find it", prompt_format="gritlm")
    assert tok.decode(p.ids) == "<|user|>\nFind it\n<|embed|>\nthe text"
    # GritLM pools every token after len(tokenizer(instruction_prefix)) tokens, special tokens included
    assert p.text_start == len(tok("<|user|>\nFind it\n<|embed|>\n")["input_ids"]) and p.text_end == len(p.ids)
    (q,) = encode_prompts(tok, ["the text"], instruction="", prompt_format="gritlm")
    assert tok.decode(q.ids) == "<|embed|>\nthe text"


def test_whole_string_formats_cut_the_string_at_max_length(tiny):
    for fmt in ("gircse", "gritlm"):
        (p,) = encode_prompts(tiny.tokenizer, ["word " * 100], instruction="Keep me.", prompt_format=fmt, max_length=20)
        assert len(p.ids) == 20 and p.text_end == 20


def test_gritlm_conversation_is_gritlm_chat_format():
    from genembed.encoders.prompts import gritlm_conversation

    assert gritlm_conversation([{"role": "user", "content": "Hi?"}], "</s>") == "<|user|>\nHi?\n<|assistant|>\n"
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert gritlm_conversation(turns, "</s>") == "<|user|>\na\n<|assistant|>\nb</s>\n<|user|>\nc\n<|assistant|>\n"
    with pytest.raises(ValueError, match="no 'tool' turn"):
        gritlm_conversation([{"role": "tool", "content": "x"}], "</s>")
