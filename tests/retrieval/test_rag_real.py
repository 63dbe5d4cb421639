"""RAG on the real default model (slow): KV reuse works on SmolLM2's RoPE (theta 100000, GQA 9/3)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.retrieval.index_build import build_index
from genembed.retrieval.kv_ops import cache_layers, encode_segment
from genembed.retrieval.rag import ask, build_context, retrieve

pytestmark = pytest.mark.slow

DOCS = [
    {"id": "photo", "title": "Photosynthesis", "text": "Plants make their food by photosynthesis: they turn sunlight, "
     "water and carbon dioxide into sugar and oxygen in their leaves."},
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": "card", "title": "Banking", "text": "If you lose your debit card, call your bank at once to block it."},
]  # fmt: skip


@pytest.fixture(scope="module")
def real_index(real_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rag")
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    config = EmbedSettings(method="mean", max_length=128)
    return build_index(
        real_model, [folder / "docs.jsonl"], folder / "idx", settings=config, store_kv=True, show_progress_bar=False
    )


def test_doc_caching_matches_plain_rag_and_answers(real_model, real_index):
    question = "How do plants make their food?"
    plain = ask(real_model, real_index, question, cache="none", order="doc_first", top_k=1, max_new_tokens=24)
    cached = ask(real_model, real_index, question, cache="doc", top_k=1, max_new_tokens=24)
    assert plain.sources[0].doc_id == "photo"
    assert any(word in plain.text.lower() for word in ("photosynthesis", "sunlight")), plain.text
    # causal method, one passage at position 0, float16 storage: the same answer as re-encoding it
    assert cached.text == plain.text and cached.cached_tokens > 0


def test_cached_passages_are_placed_by_rotating_their_keys(real_model, real_index):
    query, sources = retrieve(real_model, real_index, "What is the capital of France?", top_k=3, keep_query_kv=True)
    context = build_context(real_model, real_index, query, sources, mode="querydoc")
    lm, tok = real_model.backbone.model, real_model.backbone.tokenizer
    assert [name for name, *_ in context.layout[:2]] == ["head", "query"]
    _, start, stop, cached = context.layout[3]  # the second passage, between the third and the first
    head = real_index.rag_prompt.head_ids(tok)
    ids = real_index.rag_prompt.passage_ids(tok, [real_index.text(sources[1].row)])[0]
    keys, values = encode_segment(lm, head + ids, attention="causal", offset=start - len(head))
    layer_keys = torch.stack([k[0, :, start:stop] for k, _ in cache_layers(context.cache)])
    layer_values = torch.stack([v[0, :, start:stop] for _, v in cache_layers(context.cache)])
    assert cached and stop - start == len(ids)
    torch.testing.assert_close(layer_keys, keys[:, :, len(head) :], atol=0.05, rtol=0.01)  # float16 storage
    torch.testing.assert_close(layer_values, values[:, :, len(head) :], atol=0.05, rtol=0.01)


EIFFEL = [
    {"id": "eiffel", "title": "Eiffel Tower", "text": "The Eiffel Tower is a wrought-iron lattice tower on the Champ "
     "de Mars in Paris. It was designed by the company of Gustave Eiffel and was completed in 1889 as the entrance "
     "arch of the World's Fair."},
    {"id": "banana", "title": "Banana", "text": "A banana is an elongated, edible fruit produced by large herbaceous "
     "flowering plants. Bananas are rich in potassium."},
    {"id": "everest", "title": "Mount Everest", "text": "Mount Everest is the highest mountain above sea level, in the "
     "Mahalangur Himal sub-range of the Himalayas. Its elevation is 8,849 metres."},
]  # fmt: skip


def test_the_default_model_answers_from_the_passage_in_every_doc_first_mode(default_model, tmp_path):
    """The issue's example with default settings: the shipped adapter embeds, and generates from KV states
    its own second (causal) pass stored, which the index records by the adapter's hash. querydoc (the
    query first, GRIT's layout) is tested on the 15 factual passages below."""
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in EIFFEL))
    index = build_index(
        default_model, [tmp_path / "docs.jsonl"], tmp_path / "idx", store_kv=True, show_progress_bar=False
    )
    assert index.kv_source["adapter"].startswith("smollm2-135m-joint@sha256:")
    assert index.kv_source["pass"] == "generation"
    for mode in ("none", "query", "doc", "docquery"):
        answer = ask(
            default_model, index, "In which year was the Eiffel Tower completed?", cache=mode, max_new_tokens=40
        )
        assert answer.sources[0].doc_id == "eiffel" and "1889" in answer.text, (mode, answer.text)


FACTS = Path(__file__).resolve().parents[1] / "assets" / "rag_facts.jsonl"  # 15 passages, 5 with a question
_STOP = {"a", "an", "and", "at", "by", "for", "from", "in", "into", "is", "it", "its", "of", "on", "or", "the"}
_STOP |= {"to", "was", "were", "with", "which", "who", "what", "when", "where"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def _answered_from(answer: str, passages: dict[str, str]) -> str:
    """The id of the passage whose words the answer shares most (ties: the first in corpus order)."""
    words = _words(answer)
    return max(passages, key=lambda pid: len(words & _words(passages[pid])))


@pytest.fixture(scope="module")
def facts_index(default_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("facts")
    rows = [json.loads(line) for line in FACTS.read_text().splitlines()]
    docs = [{key: row[key] for key in ("id", "title", "text")} for row in rows]
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    index = build_index(default_model, [folder / "docs.jsonl"], folder / "idx", store_kv=True, show_progress_bar=False)
    return index, rows


@pytest.mark.parametrize("mode", ["none", "query", "doc", "querydoc", "docquery"])
def test_every_mode_answers_from_the_retrieved_passage(default_model, facts_index, mode):
    """Issue 62: on 15 short factual passages, the answer of every caching mode (``ask``'s defaults:
    three passages, greedy) holds the gold answer and shares most of its words with the passage retrieved
    first, for at least 4 of the 5 questions."""
    index, rows = facts_index
    passages = {row["id"]: f"{row['title']} {row['text']}" for row in rows}
    results = []
    for row in rows:
        if not row["question"]:
            continue
        answer = ask(default_model, index, row["question"], cache=mode, max_new_tokens=48)
        assert answer.sources[0].doc_id == row["id"]  # retrieval is not what is tested here
        gold = any(g.lower() in answer.text.lower() for g in row["answers"])
        results.append((row["id"], gold and _answered_from(answer.text, passages) == row["id"], answer.text))
    right = sum(ok for _, ok, _ in results)
    print(f"{mode}: {right} of {len(results)} answers from the retrieved passage")
    assert right >= 4, (mode, results)
