from __future__ import annotations

import json
import re

import pytest

from genembed.training.data import (
    DataError,
    GenerativeRow,
    read_contrastive,
    read_generative,
    tokenize_chat,
    tokenize_row,
)


def _write(tmp_path, lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


GOOD = {"query": "q", "pos": ["p"], "neg": ["n"], "instruction": "Retrieve."}


def test_reads_rows_and_optional_fields(tmp_path):
    path = _write(tmp_path, [GOOD, "", {"query": "q2", "pos": ["a", "b"], "label": "positive"}])
    rows = read_contrastive(path)
    assert [(r.query, r.pos, r.neg, r.instruction, r.label) for r in rows] == [
        ("q", ("p",), ("n",), "Retrieve.", None),
        ("q2", ("a", "b"), (), "", "positive"),
    ]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"query": "q", "pos": ["p"]', "not valid JSON"),
        ({"pos": ["p"]}, "missing field 'query'"),
        ({"query": "q"}, "missing field 'pos'"),
        ({"query": "q", "pos": []}, "field 'pos' is empty"),
        ({"query": "  ", "pos": ["p"]}, "field 'query' is empty"),
        ({"query": "q", "pos": "p"}, "field 'pos' must be a list of strings, got str"),
        ({"query": "q", "pos": ["p", 3]}, "field 'pos'[1] must be a string, got int"),
        ({"query": "q", "pos": ["p"], "neg": [""]}, "field 'neg'[0] is an empty string"),
        ({"query": "q", "pos": ["p"], "negs": ["x"]}, "unknown field 'negs'"),
        ({"query": "q", "pos": ["p"], "label": 1}, "field 'label' must be a string, got int"),
        ({"query": "q", "pos": ["p"], "label": ""}, "field 'label' is empty"),
        ([1, 2], "each line must be a JSON object"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, bad_line, message):
    path = _write(tmp_path, [GOOD, GOOD, bad_line, GOOD])
    with pytest.raises(DataError) as info:
        read_contrastive(path)
    assert str(info.value).startswith(f"{path}:3: {message}")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_contrastive(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="holds no rows"):
        read_contrastive(_write(tmp_path, [""]))


def test_generative_formats(tmp_path):
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = _write(tmp_path, [chat, {"prompt": "a", "response": "b"}])
    assert read_generative(path) == [
        GenerativeRow((("user", "hi"), ("assistant", "hello"))),
        GenerativeRow((("user", "a"), ("assistant", "b"))),
    ]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ({"prompt": "a"}, "missing field 'response'"),
        ({"prompt": "a", "response": ""}, "field 'response' is empty"),
        ({"body": "a"}, "missing field 'messages'"),
        ({"messages": []}, "field 'messages' must be a non-empty list"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "field 'messages' has no assistant turn"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "field 'messages[0].role' must be one of"),
        ({"messages": [{"role": "user"}]}, "field 'messages[0].content' is missing"),
    ],
)
def test_generative_errors(tmp_path, bad_line, message):
    path = _write(tmp_path, [{"prompt": "a", "response": "b"}, bad_line])
    with pytest.raises(DataError) as info:
        read_generative(path)
    assert str(info.value).startswith(f"{path}:2: {message}")


def test_labels_cover_exactly_the_assistant_turns(tiny):
    tok = tiny.tokenizer
    row = GenerativeRow(
        (("user", "What is the capital?"), ("assistant", "Paris."), ("user", "And?"), ("assistant", "No."))
    )
    ids, labels = tokenize_chat(tok, row, max_length=200)
    assert len(ids) == len(labels)
    learned = tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab != -100])
    assert learned == "Paris.<|im_end|>\nNo.<|im_end|>\n"
    assert tok.decode(ids).startswith("<|im_start|>user\nWhat is the capital?")
    assert all(lab in (-100, i) for i, lab in zip(ids, labels, strict=True))


def test_cut_to_max_length_and_nothing_left(tiny):
    row = GenerativeRow((("user", "a long question " * 10), ("assistant", "short")))
    ids, labels = tokenize_chat(tiny.tokenizer, row, max_length=1000)
    prompt_len = labels.index(next(lab for lab in labels if lab != -100))
    cut = tokenize_chat(tiny.tokenizer, row, max_length=prompt_len + 2)
    assert cut is not None and len(cut[0]) == prompt_len + 2
    assert tokenize_chat(tiny.tokenizer, row, max_length=prompt_len) is None


def test_plain_text_rows_are_read_bare_with_every_token_labelled(tmp_path, tiny):
    path = tmp_path / "gen.jsonl"
    path.write_text('{"text": "one two three"}\n{"prompt": "hi", "response": "hello"}\n')
    text, chat = read_generative(path)
    assert text == GenerativeRow((), text="one two three") and chat.text is None
    ids, labels = tokenize_row(tiny.tokenizer, text, max_length=100)
    assert ids == tiny.tokenizer("one two three", add_special_tokens=False)["input_ids"] and labels == ids
    assert tokenize_row(tiny.tokenizer, chat, 100) == tokenize_chat(tiny.tokenizer, chat, 100)
    assert tokenize_row(tiny.tokenizer, text, max_length=1) is None  # nothing after the first token


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"text": "a", "label": 1}', "unknown field 'label' next to 'text'"),
        ('{"text": "   "}', "field 'text' is empty"),
        ('{"text": 3}', "field 'text'"),
        ('{"body": "x"}', "missing field 'messages' (or 'prompt' and 'response', 'passages', or 'text')"),
    ],
)
def test_bad_plain_text_rows_name_the_line_and_field(tmp_path, line, message):
    path = tmp_path / "gen.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:1: {message}")):
        read_generative(path)
