from __future__ import annotations

import json

import pytest

from genembed.training.data import DataError, read_generative
from genembed.training.selfgen import generate_responses, read_prompts


def test_read_prompts_from_contrastive_prompt_and_text_files(tmp_path, assets):
    txt = tmp_path / "p.txt"
    txt.write_text("first prompt\n\nWhat is the capital of France?\n")
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(json.dumps({"prompt": "third"}) + "\n" + json.dumps({"text": "fourth"}) + "\n")
    prompts = read_prompts([assets / "qa_pairs.jsonl", txt, jsonl])
    assert prompts[0] == "What is the capital of France?" and len(prompts) == 10 + 1 + 2  # queries de-duplicated
    assert prompts[-3:] == ["first prompt", "third", "fourth"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "q"}) + "\n" + json.dumps({"other": 1}) + "\n")
    with pytest.raises(DataError, match=rf"{bad}:2: missing or empty field"):
        read_prompts([bad])


def test_generation_is_deterministic_resumable_and_readable_as_training_data(tmp_path, tiny, assets):
    prompts = read_prompts([assets / "similar.jsonl"])
    kwargs = {"max_new_tokens": 6, "batch_size": 2, "limit": 6, "temperature": 1.0, "seed": 3, "progress": False}
    full = generate_responses(tiny, prompts, tmp_path / "full.jsonl", **kwargs).read_text()
    assert len(full.splitlines()) == 6

    # a crash after the first batch: the partial file holds 2 rows and half a line
    partial = tmp_path / "resumed.jsonl.partial"
    partial.write_text("".join(full.splitlines(keepends=True)[:2]) + '{"prompt": "cut')
    resumed = generate_responses(tiny, prompts, tmp_path / "resumed.jsonl", **kwargs).read_text()
    assert resumed.splitlines()[:2] == full.splitlines()[:2] and not partial.exists()
    assert [json.loads(x)["prompt"] for x in resumed.splitlines()] == [
        json.loads(x)["prompt"] for x in full.splitlines()
    ]
    rows = read_generative(tmp_path / "full.jsonl")
    assert len(rows) == 6 and all(r.messages[0][0] == "user" and r.messages[1][0] == "assistant" for r in rows)


def test_offset_gives_a_held_aside_split_disjoint_from_the_training_prompts(tmp_path, tiny, assets):
    prompts = read_prompts([assets / "similar.jsonl"])
    kwargs = {"max_new_tokens": 6, "batch_size": 4, "temperature": 1.0, "seed": 5, "progress": False}
    train = generate_responses(tiny, prompts, tmp_path / "train.jsonl", limit=4, **kwargs).read_text()
    held = generate_responses(tiny, prompts, tmp_path / "held.jsonl", offset=4, limit=3, **kwargs).read_text()
    both = generate_responses(tiny, prompts, tmp_path / "both.jsonl", limit=7, **kwargs).read_text()
    train_prompts = [json.loads(x)["prompt"] for x in train.splitlines()]
    held_prompts = [json.loads(x)["prompt"] for x in held.splitlines()]
    assert len(held_prompts) == 3 and not set(train_prompts) & set(held_prompts)
    assert train_prompts + held_prompts == [json.loads(x)["prompt"] for x in both.splitlines()]
    with pytest.raises(ValueError, match="offset must be >= 0"):
        generate_responses(tiny, prompts, tmp_path / "x.jsonl", offset=-1, **kwargs)
