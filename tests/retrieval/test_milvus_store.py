"""The Milvus store against embedded milvus-lite in a temporary folder: the same results as the faiss
folder, metadata and filters, upsert and delete, resuming, and refusing another model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.retrieval import index_build
from genembed.retrieval.errors import IndexIncompleteError
from genembed.retrieval.index_build import add_to_index, build_index, generation_states
from genembed.retrieval.kv_embed import encode_with_kv
from genembed.retrieval.milvus_store import PROGRESS_KEY, MilvusStore, chunk_key
from genembed.retrieval.rag import ask
from genembed.retrieval.stores import open_index, parse_location

from .conftest import DOCS, MORE, write_jsonl

SMALL = {"chunk_tokens": 12, "overlap": 3, "show_progress_bar": False, "config": EmbedSettings(method="mean")}
QUERIES = ["capital of France", "a man playing guitar", "the product broke"]


def _build(model, sources, out, **kwargs):
    return build_index(model, sources, out, **{**SMALL, **kwargs})


@pytest.fixture
def docs_with_meta(tmp_path):
    return write_jsonl(tmp_path / "meta.jsonl", [dict(d, year=2000 + i) for i, d in enumerate(DOCS)])


@pytest.fixture
def lite(tmp_path):
    return f"milvus:{tmp_path}/idx.db"


def _ids(index, rows):
    return [[index.chunk(int(i)).id for i in row if i >= 0] for row in rows]


def test_milvus_store_matches_the_faiss_folder_and_returns_metadata(tiny_model, docs_with_meta, lite, tmp_path):
    faiss = _build(tiny_model, [docs_with_meta], tmp_path / "faiss")
    milvus = _build(tiny_model, [docs_with_meta], lite)
    assert isinstance(milvus, MilvusStore) and len(milvus) == len(faiss) > 10
    queries = milvus.encode_queries(tiny_model, QUERIES)
    np.testing.assert_array_equal(queries, faiss.encode_queries(tiny_model, QUERIES))
    f_scores, f_ids = faiss.search(queries, 6)
    m_scores, m_ids = milvus.search(queries, 6)
    assert _ids(milvus, m_ids) == _ids(faiss, f_ids)
    np.testing.assert_allclose(m_scores, f_scores, atol=1e-5)
    # ids are the chunk ids' stable keys; every field comes back as stored
    by_id = {c.id: c for c in faiss.chunks}
    for key in m_ids[0]:
        got = milvus.chunk(int(key))
        assert int(key) == chunk_key(got.id)
        want = by_id[got.id]
        assert (got.doc_id, got.number, got.title, got.text, got.source, got.tokens) == (
            want.doc_id,
            want.number,
            want.title,
            want.text,
            want.source,
            want.tokens,
        )
        assert got.meta == want.meta == {"year": 2000 + [d["id"] for d in DOCS].index(got.doc_id)}
        assert milvus.text(int(key)) == faiss.text(want.row)
    # a search hit has the same fields from either store, the corpus ids among them (its key differs)
    f_hits = tiny_model.search(QUERIES[0], faiss, k=4, rerank=False)
    m_hits = tiny_model.search(QUERIES[0], milvus, k=4, rerank=False)
    assert [(h.id, h.doc_id, h.text, h.retrieval_rank) for h in m_hits] == [
        (h.id, h.doc_id, h.text, h.retrieval_rank) for h in f_hits
    ]
    assert all(h.id.startswith(f"{h.doc_id}#") and h.doc_id in {d["id"] for d in DOCS} for h in f_hits)
    assert [h.index for h in f_hits] == [by_id[h.id].row for h in f_hits]
    assert [h.index for h in m_hits] == [chunk_key(h.id) for h in m_hits]
    # a second handle reads the model and settings from the collection, and loads a released one
    milvus.client.release_collection(milvus.name)
    again = open_index(lite)
    assert again.manifest["model"] == faiss.manifest["model"] and again.config == faiss.config
    assert again.manifest["embed"]["method"] == "mean" and again.manifest["milvus"]["index_type"] == "AUTOINDEX"
    scores, ids = again.search(queries[:1], len(again) + 2)  # past the end: -1 ids, -inf scores
    assert sorted(_ids(again, ids)[0]) == sorted(by_id) and list(ids[0, -2:]) == [-1, -1]
    assert np.isneginf(scores[0, -2:]).all()
    # the same chunk gets the same key in a separate build
    other = _build(tiny_model, [docs_with_meta], f"milvus:{tmp_path}/other.db")
    assert other.search(queries, 6)[1].tolist() == m_ids.tolist()


def test_filters_in_search_model_search_and_ask(tiny_model, docs_with_meta, lite, tmp_path):
    milvus = _build(tiny_model, [docs_with_meta], lite, store_kv=True, kv_dtype="float32")
    queries = milvus.encode_queries(tiny_model, QUERIES)
    _, ids = milvus.search(queries, 10, filter='doc_id == "fox"')
    fox = [c.id for c in milvus.query('doc_id == "fox"')]
    assert len(fox) >= 2 and all(sorted(row) == sorted(fox) for row in _ids(milvus, ids))
    _, ids = milvus.search(queries, 10, filter='meta["year"] >= 3000')
    assert ids.max() == -1  # no chunk matches
    _, ids = milvus.search(queries, 10, filter='meta["year"] >= 2003 and number == 0')
    assert sorted(_ids(milvus, ids)[0]) == ["emotion#0", "product#0"]
    with pytest.raises(ValueError, match=r"Milvus refused the search with filter 'nonsense ==== 3'"):
        milvus.search(queries, 3, filter="nonsense ==== 3")
    faiss = _build(tiny_model, [docs_with_meta], tmp_path / "faiss")
    with pytest.raises(ValueError, match="faiss folder, which cannot filter on metadata"):
        faiss.search(queries, 3, filter='doc_id == "fox"')
    # retrieve-then-rerank through model.search, restricted by the filter
    hits = tiny_model.search("a guitar", milvus, k=3, rerank=True, filter='doc_id in ["guitar", "france"]')
    allowed = {milvus.text(c.row) for c in milvus.query('doc_id in ["guitar", "france"]')}
    assert len(hits) == 3 and all(h.text in allowed and h.rerank_score is not None for h in hits)
    # ask: retrieval honours the filter, and doc caching reads the stored KV states
    answer = ask(tiny_model, milvus, "a guitar?", cache="doc", top_k=2, max_new_tokens=2, filter='doc_id == "france"')
    assert [s.doc_id for s in answer.sources] == ["france", "france"] and answer.cached_tokens > 0
    row = answer.sources[0].row
    # the stored states are the generator's own causal pass over the passage segment after the prompt's head
    (fresh,) = generation_states(tiny_model, milvus.rag_prompt, [milvus.text(row)], None, batch_size=1, kv_dtype=None)
    torch.testing.assert_close(milvus.kv(row)[0], fresh[0], atol=1e-5, rtol=1e-4)


def test_upsert_replaces_documents_and_delete_removes_them(tiny_model, docs_with_meta, lite, tmp_path):
    milvus = _build(tiny_model, [docs_with_meta], lite)
    n, n_fox = len(milvus), len(milvus.query('doc_id == "fox"'))
    assert n_fox >= 2
    changed = write_jsonl(tmp_path / "changed.jsonl", [{"id": "fox", "title": "Animals", "text": "A fox."}, *MORE])
    grown = add_to_index(tiny_model, lite, [changed], show_progress_bar=False)
    fox = grown.query('doc_id == "fox"')
    assert [(c.id, c.text) for c in fox] == [("fox#0", "A fox.")]  # replaced, the chunks it lost deleted
    n_more = len(grown.query('doc_id in ["retrieve", "similar"]'))
    assert n_more >= 2 and len(grown) == n - n_fox + 1 + n_more
    own = encode_with_kv(tiny_model.backbone, [grown.text(chunk_key("fox#0"))], grown.config, keep_kv=False)
    assert grown.search(own.embeddings, 1)[1][0, 0] == chunk_key("fox#0")
    assert grown.manifest["sources"] == [str(docs_with_meta), str(changed)]
    # delete by document id, by chunk id and by filter
    before, n_retrieve = len(grown), len(grown.query('doc_id == "retrieve"'))
    assert grown.delete(doc_ids=["fox", "retrieve"]) == 1 + n_retrieve
    assert grown.query('doc_id in ["fox", "retrieve"]') == [] and len(grown) == before - 1 - n_retrieve
    assert grown.delete(chunk_ids=["guitar#0", "no#such"]) == 1
    n_france = len(grown.query('doc_id == "france"'))
    assert grown.delete(filter='meta["year"] == 2000') == n_france > 0
    assert len(open_index(lite)) == len(grown) == before - 1 - n_retrieve - 1 - n_france
    with pytest.raises(ValueError, match="exactly one of"):
        grown.delete()


def test_an_interrupted_build_resumes_without_duplicates(tiny_model, docs_file, lite, tmp_path, monkeypatch):
    kwargs = {"store_kv": True, "kv_dtype": "float32", "shard_size": 4}
    reference = _build(tiny_model, [docs_file], tmp_path / "ref", **kwargs)
    n_shards = -(-len(reference) // 4)
    assert n_shards >= 3
    calls: list[int] = []
    real_encode = index_build.encode_with_kv

    def crash_on_third_shard(backbone, texts, *args, **kw):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_encode(backbone, texts, *args, **kw)

    monkeypatch.setattr(index_build, "encode_with_kv", crash_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        _build(tiny_model, [docs_file], lite, **kwargs)
    with pytest.raises(IndexIncompleteError, match="rerun the same `genembed index build` command"):
        open_index(lite)
    partial = MilvusStore.open(parse_location(lite), allow_incomplete=True)
    assert len(partial) == 8  # the two finished shards
    calls.clear()
    monkeypatch.setattr(index_build, "encode_with_kv", lambda *a, **k: calls.append(1) or real_encode(*a, **k))
    resumed = _build(tiny_model, [docs_file], lite, **kwargs)
    assert len(calls) == n_shards - 2 and len(resumed) == len(reference)
    assert sorted(c.id for c in resumed.query("number >= 0", limit=1000)) == sorted(c.id for c in reference.chunks)
    for c in reference.chunks:
        torch.testing.assert_close(resumed.kv(chunk_key(c.id))[0], reference.kv(c.row)[0])
    assert not resumed.client.describe_collection(resumed.name)["properties"].get(PROGRESS_KEY)
    with pytest.raises(FileExistsError, match="already holds an index"):
        _build(tiny_model, [docs_file], lite, **kwargs)


def test_another_model_is_refused(tiny_model, docs_file, more_file, lite, tmp_path):
    from genembed.backbone import tiny_backbone
    from genembed.model import GenerativeEmbedder

    _build(tiny_model, [docs_file], lite)
    other = GenerativeEmbedder(tiny_backbone(seed=1))
    index = open_index(lite)
    with pytest.raises(ValueError, match="was built with model 'tiny-llama-0'"):
        index.encode_queries(other, ["x"])
    with pytest.raises(ValueError, match="was built with model 'tiny-llama-0'"):
        add_to_index(other, lite, [more_file], show_progress_bar=False)
    # another collection in the same database is independent
    second = _build(other, [more_file], parse_location(lite, collection="second"))
    assert len(second) < len(index) and open_index(lite, collection="second").manifest["model"]["name"] == other.name


def test_milvus_index_type_and_parameters(tiny_model, docs_file, lite):
    index = _build(
        tiny_model,
        [docs_file],
        lite,
        index_type="hnsw",
        index_params={"M": 8, "efConstruction": 32},
        search_params={"ef": 16},
    )
    assert index.manifest["milvus"] == {
        "index_type": "HNSW",
        "index_params": {"M": 8, "efConstruction": 32},
        "search_params": {"ef": 16},
    }
    described = index.client.describe_index(index.name, "vector")
    assert described["index_type"] == "HNSW" and described["metric_type"] == "IP"  # milvus-lite omits M here
    queries = index.encode_queries(tiny_model, QUERIES)
    exact = index.search(queries, 5)[1]
    index.set_search_params({"ef": 64})
    assert (
        index.search_params == {"ef": 64} and index.search(queries, 5, params={"ef": 128})[1].tolist() == exact.tolist()
    )
