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


def test_rag_items_hold_the_positive_and_distractors_cut_and_shuffled(tmp_path, tiny, assets):
    from genembed.training.selfgen import read_rag_items

    tok = tiny.tokenizer
    items = read_rag_items([assets / "qa_pairs.jsonl"], tok, top_k=3, passage_tokens=1000, seed=1)
    rows = [json.loads(x) for x in (assets / "qa_pairs.jsonl").read_text().splitlines()]
    questions = list(dict.fromkeys(r["query"] for r in rows))
    assert [i.question for i in items] == questions  # one item per question, the first row's
    positives = {r["pos"][0] for r in rows}
    for item, question in zip(items, questions, strict=True):
        first = next(r for r in rows if r["query"] == question)
        assert len(item.passages) == 3 and len(set(item.passages)) == 3
        assert first["pos"][0] in item.passages and set(item.passages) <= positives | set(first["neg"])
    # the gold passage is not always first: a retriever's order, drawn with the seed
    assert (
        len({item.passages.index(next(r for r in rows if r["query"] == item.question)["pos"][0]) for item in items}) > 1
    )
    assert read_rag_items([assets / "qa_pairs.jsonl"], tok, top_k=3, seed=1) == read_rag_items(
        [assets / "qa_pairs.jsonl"], tok, top_k=3, seed=1
    )
    short = read_rag_items([assets / "qa_pairs.jsonl"], tok, top_k=1, passage_tokens=2)
    assert all(
        len(i.passages) == 1 and len(tok(i.passages[0], add_special_tokens=False)["input_ids"]) <= 3 for i in short
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "q", "pos": ["p"]}) + "\n" + json.dumps({"query": "q2", "pos": "p"}) + "\n")
    with pytest.raises(DataError, match=rf"{bad}:2: field 'pos' must be a non-empty list of strings"):
        read_rag_items([bad], tok)
    with pytest.raises(ValueError, match="top_k and passage_tokens must be >= 1"):
        read_rag_items([bad], tok, top_k=0)


def test_rag_answers_are_written_resumed_and_trained_on_asks_prompt(tmp_path, tiny, assets):
    from genembed.generation.rag_prompt import RagPrompt
    from genembed.training.data.generative import IGNORE, tokenize_row
    from genembed.training.selfgen import read_rag_items

    items = read_rag_items([assets / "qa_pairs.jsonl"], tiny.tokenizer, top_k=2, passage_tokens=40)
    kwargs = {"max_new_tokens": 5, "batch_size": 2, "limit": 4, "temperature": 1.0, "seed": 2, "progress": False}
    full = generate_responses(tiny, items, tmp_path / "rag.jsonl", no_repeat_ngram_size=2, **kwargs).read_text()
    written = [json.loads(x) for x in full.splitlines()]
    assert len(written) == 4 and all(set(r) == {"passages", "question", "response"} for r in written)
    partial = tmp_path / "again.jsonl.partial"
    partial.write_text(full.splitlines(keepends=True)[0] + '{"passages": ["cut')
    again = generate_responses(tiny, items, tmp_path / "again.jsonl", no_repeat_ngram_size=2, **kwargs).read_text()
    assert again == full

    (row, *_) = read_generative(tmp_path / "rag.jsonl")
    tok = tiny.tokenizer
    ids, labels = tokenize_row(tok, row, max_length=4096)
    prompt = RagPrompt().prompt_ids(tok, list(row.passages), written[0]["question"])
    assert ids[: len(prompt)] == prompt and labels[: len(prompt)] == [IGNORE] * len(prompt)
    reply = tok.decode(ids[len(prompt) :])
    assert (
        reply.startswith(written[0]["response"]) and reply.removeprefix(written[0]["response"]).strip() == "<|im_end|>"
    )
    assert labels[len(prompt) :] == ids[len(prompt) :]
    assert tokenize_row(tok, row, max_length=len(prompt)) is None  # the answer cut away: nothing to learn


def test_rag_rows_with_bad_fields_name_file_line_and_field(tmp_path):
    path = tmp_path / "rows.jsonl"
    good = {"passages": ["Paris is in France."], "question": "Where is Paris?", "response": "In France."}
    cases = [
        ({**good, "passages": []}, "field 'passages' must be a non-empty list of strings"),
        ({**good, "passages": ["ok", " "]}, "field 'passages\\[1\\]' must be a non-empty string"),
        ({**good, "answer": "x"}, "unknown field 'answer' \\(expected 'passages', 'question' and 'response'\\)"),
        ({k: v for k, v in good.items() if k != "question"}, "question"),
        ({**good, "response": "  "}, "field 'response' is empty"),
    ]
    for row, message in cases:
        path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(DataError, match=rf"{path}:2: .*{message}"):
            read_generative(path)
    path.write_text(json.dumps(good) + "\n")
    (row,) = read_generative(path)
    assert row.passages == ("Paris is in France.",) and row.messages[1] == ("assistant", "In France.")
