from __future__ import annotations

import numpy as np
import pytest

from genembed.retrieval.search import ExactIndex, SearchHit, SearchIndex, rerank_hits, retrieve_hits, search

CORPUS = [
    "Paris is the capital of France.",
    "The quick brown fox jumps over the lazy dog.",
    "I love this movie, it is wonderful and moving.",
    "A man is playing a guitar on the stage.",
    "The product broke after two days, very disappointing.",
    "Retrieve semantically similar text.",
]
QUERY = "What is the capital of France?"


class ListIndex:
    """A minimal index implementing the protocol, counting its calls."""

    def __init__(self, model, texts):
        self.texts = texts
        self.embeddings = model.encode_document(texts, method="mean")
        self.calls = []

    def search(self, query_embeddings, k):
        self.calls.append(k)
        sims = query_embeddings @ self.embeddings.T
        ids = np.argsort(-sims, axis=1)[:, :k]
        return np.take_along_axis(sims, ids, axis=1), ids

    def text(self, i):
        return self.texts[i]


def _by_embedding(model, k, **kwargs):
    q = model.encode_query(QUERY, method="mean", **kwargs)
    d = model.encode_document(CORPUS, method="mean")
    sims = d @ q
    return [int(i) for i in np.argsort(-sims)[:k]], np.sort(sims)[::-1][:k]


def test_list_without_rerank_is_exact_inner_product(tiny_model):
    hits = search(tiny_model, QUERY, CORPUS, k=4, rerank=False, method="mean")
    order, sims = _by_embedding(tiny_model, 4)
    assert [h.index for h in hits] == order
    np.testing.assert_allclose([h.score for h in hits], sims, atol=1e-5)
    assert [h.retrieval_rank for h in hits] == [0, 1, 2, 3]
    assert all(h.text == CORPUS[h.index] and h.rerank_score is None for h in hits)
    assert all(h.id == h.doc_id == str(h.index) for h in hits)  # a list's ids are its positions


def test_rerank_reorders_the_top_candidates_by_rerank_score(tiny_model):
    hits = tiny_model.search(QUERY, CORPUS, k=3, rerank_top=5, method="mean")
    order, _ = _by_embedding(tiny_model, 5)
    candidates = [CORPUS[i] for i in order]
    expected = tiny_model.rerank(QUERY, candidates, instruction=None)
    assert [h.index for h in hits] == [order[r.index] for r in expected[:3]]
    assert [h.score for h in hits] == pytest.approx([r.score for r in expected[:3]])
    assert all(h.rerank_score == h.score for h in hits)
    assert [h.retrieval_rank for h in hits] == [r.index for r in expected[:3]]


def test_rerank_top_smaller_than_k_keeps_the_tail_in_retrieval_order(tiny_model):
    hits = tiny_model.search(QUERY, CORPUS, k=5, rerank_top=2, method="mean")
    order, _ = _by_embedding(tiny_model, 5)
    assert sorted(h.index for h in hits[:2]) == sorted(order[:2])
    assert [h.index for h in hits[2:]] == order[2:]
    assert [h.rerank_score is None for h in hits] == [False, False, True, True, True]


def test_index_protocol(tiny_model):
    index = ListIndex(tiny_model, CORPUS)
    assert isinstance(index, SearchIndex)
    from_index = tiny_model.search(QUERY, index, k=3, rerank_top=4, method="mean")
    from_list = tiny_model.search(QUERY, CORPUS, k=3, rerank_top=4, method="mean")
    assert index.calls == [4]  # retrieves max(k, rerank_top) candidates
    assert [(h.index, round(h.score, 5)) for h in from_index] == [(h.index, round(h.score, 5)) for h in from_list]
    assert all(isinstance(h, SearchHit) for h in from_index)


def test_instruction_reaches_embedding_and_rerank(tiny_model):
    plain = tiny_model.search(QUERY, CORPUS, k=6, method="mean")
    instructed = tiny_model.search(QUERY, CORPUS, k=6, method="mean", instruction="Classify the emotion.")
    assert [h.retrieval_score for h in plain] != pytest.approx([h.retrieval_score for h in instructed])
    assert sorted(h.score for h in plain) != pytest.approx(sorted(h.score for h in instructed), abs=1e-4)


def test_exact_index_pads_when_k_exceeds_corpus():
    index = ExactIndex(np.eye(3, dtype=np.float32), ["a", "b", "c"])
    scores, ids = index.search(np.array([[0.1, 0.9, 0.5]]), 5)
    assert ids.tolist() == [[1, 2, 0, -1, -1]]
    np.testing.assert_allclose(scores[0, :3], [0.9, 0.5, 0.1])
    assert np.isneginf(scores[0, 3:]).all()


def test_small_corpus_and_bad_inputs(tiny_model):
    hits = search(tiny_model, QUERY, CORPUS[:2], k=10, rerank=False, method="mean")
    assert len(hits) == 2
    assert search(tiny_model, QUERY, [], k=3, method="mean") == []
    with pytest.raises(TypeError, match="corpus_or_index must be a list of texts or an index"):
        search(tiny_model, QUERY, "just one string")
    with pytest.raises(TypeError, match=r"corpus_or_index\[1\] must be a string, got int"):
        search(tiny_model, QUERY, ["a", 1])
    with pytest.raises(ValueError, match="k and rerank_top must be >= 1"):
        search(tiny_model, QUERY, CORPUS, k=0)
    with pytest.raises(ValueError, match=r"need \(n, dim\) embeddings for n=2"):
        ExactIndex(np.zeros((3, 4)), ["a", "b"])


class EncodingIndex(ListIndex):
    """An index that embeds queries itself (as genembed.retrieval.Index does), here with method 'last'."""

    def encode_queries(self, model, queries):
        return model.encode_query(queries, method="last", instruction="Index's own instruction.")


def test_index_that_encodes_its_own_queries(tiny_model):
    index = EncodingIndex(tiny_model, CORPUS)
    hits = search(tiny_model, QUERY, index, k=3, rerank=False)
    own = tiny_model.encode_query(QUERY, method="last", instruction="Index's own instruction.")
    np.testing.assert_allclose([h.score for h in hits], np.sort(index.embeddings @ own)[::-1][:3], atol=1e-5)
    with pytest.raises(ValueError, match=r"embeds queries with its own settings; drop \['method'\]"):
        search(tiny_model, QUERY, index, method="mean")


def test_rerank_scoring_is_passed_on(tiny_model):
    hits = search(tiny_model, QUERY, CORPUS, k=4, method="mean", rerank_scoring="query_likelihood")
    order, _ = _by_embedding(tiny_model, 4)
    expected = tiny_model.rerank(QUERY, [CORPUS[i] for i in order], scoring="query_likelihood")
    assert [h.index for h in hits] == [order[r.index] for r in expected]
    assert [h.score for h in hits] == pytest.approx([r.score for r in expected])


def test_retrieve_then_rerank_steps_without_a_model():
    index = ExactIndex(np.eye(3, dtype=np.float32), ["a", "b", "c"])
    hits = retrieve_hits(index, np.array([[0.1, 0.9, 0.5]], dtype=np.float32), 5)
    assert [(h.index, h.text, h.retrieval_rank) for h in hits] == [(1, "b", 0), (2, "c", 1), (0, "a", 2)]  # no -1s
    with pytest.raises(ValueError, match="ExactIndex cannot filter on metadata"):
        retrieve_hits(index, np.ones((1, 3), dtype=np.float32), 2, filter="doc_id == 'a'")

    class Reranker:
        def rerank(self, query, documents, **kwargs):
            self.kwargs = kwargs
            scores = {"b": -2.0, "c": -1.0}
            order = sorted(range(len(documents)), key=lambda i: -scores[documents[i]])
            return [type("R", (), {"index": i, "score": scores[documents[i]]}) for i in order]

    model = Reranker()
    reranked = rerank_hits(model, "q", hits, 2, batch_size=4)
    assert [(h.index, h.score, h.rerank_score) for h in reranked] == [
        (2, -1.0, -1.0),
        (1, -2.0, -2.0),
        (0, pytest.approx(0.1), None),
    ]
    assert reranked[0].retrieval_score == pytest.approx(0.5) and model.kwargs == {"batch_size": 4}
    assert rerank_hits(model, "q", hits, 0) == hits
