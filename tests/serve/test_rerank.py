"""Rerank over HTTP: /v1/rerank (Cohere v1 / Jina) and /v2/rerank (Cohere v2, driven with the real
``cohere`` client). ``relevance_score`` is a probability that means what docs/serving.md says."""

from __future__ import annotations

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


def _rerank(served, path="/v1/rerank", **body):
    response = httpx.post(served.url + path, json={"query": QUERY, "documents": DOCS, **body}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_query_likelihood_scores_are_a_distribution_over_the_documents(served):
    body = _rerank(served, model="any-reranker")
    expected = served.reference.rerank(QUERY, DOCS)  # the default scoring: query likelihood
    assert [r["index"] for r in body["results"]] == [r.index for r in expected]
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert sum(scores) == pytest.approx(1.0, abs=1e-5)  # P(the query was written for document i)
    for got in body["results"]:
        assert got["document"] == {"text": DOCS[got["index"]]}
    assert body["model"] == served.reference.name
    alone = _rerank(served, documents=DOCS[:1])["results"]
    assert alone[0]["relevance_score"] == pytest.approx(1.0)  # the only candidate


def test_yes_no_scores_judge_each_document_alone(served):
    body = _rerank(served, scoring="yes_no")
    expected = served.reference.rerank(QUERY, DOCS, scoring="yes_no")
    assert [r["index"] for r in body["results"]] == [r.index for r in expected]
    for got in body["results"]:
        assert 0 <= got["relevance_score"] <= 1
        alone = _rerank(served, scoring="yes_no", documents=[DOCS[got["index"]]])["results"][0]
        assert alone["relevance_score"] == pytest.approx(got["relevance_score"], abs=1e-5)


def test_server_default_scoring(serve_tiny):
    with serve_tiny(rerank_scoring="yes_no") as s:
        default = _rerank(s)["results"]
        assert default == _rerank(s, scoring="yes_no")["results"]
        assert sum(r["relevance_score"] for r in _rerank(s, scoring="query_likelihood")["results"]) == pytest.approx(1)


def test_top_n_keeps_the_scores_over_all_documents(served):
    full = _rerank(served)
    body = _rerank(served, top_n=2, return_documents=False)
    assert body["results"] == [{k: v for k, v in r.items() if k != "document"} for r in full["results"][:2]]


def test_documents_as_objects_and_instruction(served):
    as_objects = _rerank(served, documents=[{"text": d} for d in DOCS])
    assert as_objects["results"] == _rerank(served)["results"]
    instruction = "Given a question, retrieve passages that answer it."
    body = _rerank(served, instruction=instruction)
    expected = served.reference.rerank(QUERY, DOCS, instruction=instruction)
    assert [r["index"] for r in body["results"]] == [r.index for r in expected]
    assert body["results"] != _rerank(served)["results"]


def test_bad_scoring_and_lax_types_are_422(served):
    for extra, param in [({"scoring": "listwise"}, "scoring"), ({"return_documents": 0}, "return_documents")]:
        response = httpx.post(served.url + "/v1/rerank", json={"query": QUERY, "documents": DOCS, **extra})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["param"] == param
    response = httpx.post(served.url + "/v2/rerank", json={"query": QUERY, "documents": [{"text": "objects are v1"}]})
    assert response.status_code == 422


def test_usage_counts_query_per_document(served):
    tok = served.reference.backbone.tokenizer
    q = len(tok(QUERY, add_special_tokens=False).input_ids)
    d = sum(len(ids) for ids in tok(DOCS, add_special_tokens=False).input_ids)
    assert _rerank(served)["usage"] == {"total_tokens": len(DOCS) * q + d}
    assert _rerank(served, "/v2/rerank")["meta"]["tokens"] == {"input_tokens": len(DOCS) * q + d}


def test_cohere_v2_client(served):
    import cohere

    client = cohere.ClientV2(base_url=served.url, api_key="unused", timeout=60)
    response = client.rerank(model="genembed", query=QUERY, documents=DOCS, top_n=3)
    v1 = _rerank(served)["results"]
    assert [r.index for r in response.results] == [r["index"] for r in v1[:3]]
    assert [r.relevance_score for r in response.results] == pytest.approx([r["relevance_score"] for r in v1[:3]])
    assert response.meta.api_version.version == "2"
    assert response.id


def test_max_tokens_per_doc_cuts_documents(served):
    body = _rerank(served, "/v2/rerank", max_tokens_per_doc=3)
    expected = served.reference.rerank(QUERY, DOCS, max_length=3)
    assert [r["index"] for r in body["results"]] == [r.index for r in expected]
    assert [r["relevance_score"] for r in body["results"]] == pytest.approx([r.probability for r in expected])


LONG = " ".join(["The committee reviewed the annual report on regional water supplies in detail."] * 84)  # 1,008 words


def _tokens(served, text: str) -> int:
    return len(served.reference.backbone.tokenizer(text, add_special_tokens=False).input_ids)


def test_a_long_document_is_cut_to_fit_by_default_through_the_cohere_clients(served):
    import cohere

    assert len(LONG.split()) >= 1000
    docs = [LONG, *DOCS]
    room = served.state.settings.max_input_tokens - _tokens(served, QUERY)
    assert _tokens(served, LONG) > 2 * room  # far beyond the server's limit
    expected = served.reference.rerank(QUERY, docs, max_length=room)  # what the model reads
    v1 = cohere.Client(base_url=served.url, api_key="unused", timeout=60).rerank(
        model="genembed", query=QUERY, documents=docs
    )
    assert [r.index for r in v1.results] == [r.index for r in expected]
    assert [r.relevance_score for r in v1.results] == pytest.approx([r.probability for r in expected], abs=1e-5)
    v2 = cohere.ClientV2(base_url=served.url, api_key="unused", timeout=60).rerank(
        model="genembed", query=QUERY, documents=docs
    )
    assert [r.index for r in v2.results] == [r.index for r in expected]
    assert "1 document(s) cut to fit" in v2.meta.warnings[0] and "(indices 0)" in v2.meta.warnings[0]
    assert v1.meta.warnings == v2.meta.warnings  # v1 says so too, in Cohere v1's meta.warnings
    assert v1.meta.api_version.version == "1"
    q = _tokens(served, QUERY)
    assert v2.meta.tokens.input_tokens == len(docs) * q + room + sum(_tokens(served, d) for d in DOCS)
    assert _rerank(served, "/v2/rerank").get("meta", {}).get("warnings") is None  # nothing cut, nothing said
    assert "meta" not in _rerank(served, "/v1/rerank")


def test_truncation_false_refuses_a_long_document_with_its_real_length(served):
    n, q = _tokens(served, LONG), _tokens(served, QUERY)
    limit = served.state.settings.max_input_tokens
    for path in ("/v1/rerank", "/v2/rerank"):
        body = {"query": QUERY, "documents": [DOCS[0], LONG], "truncation": False}
        response = httpx.post(served.url + path, json=body, timeout=60)
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["param"] == "documents.1" and error["code"] == "too_many_tokens"
        assert error["message"].startswith(f"documents[1] is {n} tokens long and the query {q}: {n + q} in all")
        assert f"at most {limit} per document" in error["message"]
    # a client's own max_tokens_per_doc that fits is honoured in strict mode too
    body = {"query": QUERY, "documents": [LONG], "truncation": False, "max_tokens_per_doc": 5}
    assert httpx.post(served.url + "/v2/rerank", json=body, timeout=60).status_code == 200


def test_a_query_that_leaves_no_room_is_413(serve_tiny):
    with serve_tiny(max_input_tokens=4) as s:
        response = httpx.post(s.url + "/v1/rerank", json={"query": QUERY, "documents": DOCS}, timeout=60)
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["param"] == "query" and "no document fits beside it" in error["message"]
