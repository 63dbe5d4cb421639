from __future__ import annotations

import math

import httpx
import pytest

pytestmark = pytest.mark.integration

QUERY = "What is the capital of France?"
DOCS = [
    "I love this movie, it is wonderful and moving.",
    "Paris is the capital of France.",
    "The product broke after two days, very disappointing.",
    "A man is playing a guitar on the stage.",
]


def _rerank(served, **body):
    response = httpx.post(served.url + "/v1/rerank", json={"query": QUERY, "documents": DOCS, **body}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_rerank_equals_direct_scoring(served):
    body = _rerank(served, model="any-reranker")
    expected = served.reference.rerank(QUERY, DOCS)
    assert [r["index"] for r in body["results"]] == [r.index for r in expected]
    for got, want in zip(body["results"], expected, strict=True):
        # relevance_score = P(yes | yes or no) = sigmoid of the model's log-odds
        assert got["relevance_score"] == pytest.approx(1 / (1 + math.exp(-want.score)), abs=1e-6)
        assert got["document"] == {"text": DOCS[got["index"]]}
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert body["model"] == served.reference.name


def test_top_n_and_return_documents(served):
    full = _rerank(served)
    body = _rerank(served, top_n=2, return_documents=False)
    assert [r["index"] for r in body["results"]] == [r["index"] for r in full["results"][:2]]
    assert all("document" not in r for r in body["results"])


def test_documents_as_objects_and_instruction(served):
    as_objects = _rerank(served, documents=[{"text": d} for d in DOCS])
    assert as_objects["results"] == _rerank(served)["results"]
    instruction = "Given a question, retrieve passages that answer it."
    body = _rerank(served, instruction=instruction)
    expected = served.reference.rerank(QUERY, DOCS, instruction=instruction)
    assert [r["index"] for r in body["results"]] == [r.index for r in expected]
    assert body["results"][0]["relevance_score"] == pytest.approx(1 / (1 + math.exp(-expected[0].score)), abs=1e-6)


def test_usage_counts_query_per_document(served):
    tok = served.reference.backbone.tokenizer
    q = len(tok(QUERY, add_special_tokens=False).input_ids)
    d = sum(len(ids) for ids in tok(DOCS, add_special_tokens=False).input_ids)
    assert _rerank(served)["usage"] == {"total_tokens": len(DOCS) * q + d}
