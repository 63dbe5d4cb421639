"""Importing `genembed encode` shards into a faiss folder and a Milvus store: same results, the recorded
settings embed queries like `encode` did, and an interrupted Milvus import resumes without duplicates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from genembed.encoders import EmbedSettings
from genembed.encoders.corpus import encode_corpus, load_corpus_embeddings
from genembed.retrieval.encoded_import import import_encoded
from genembed.retrieval.milvus_store import MilvusStore, chunk_key
from genembed.retrieval.stores import open_index

from .conftest import DOCS, MORE, write_jsonl

INSTRUCTION = "Find the passage."


@pytest.fixture
def encoded(tiny_model, tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS + MORE)
    options = EmbedSettings.build(method="mean", max_length=64)
    encode_corpus(
        tiny_model.backbone,
        corpus,
        tmp_path / "emb",
        options,
        shard_size=2,
        model_name=tiny_model.name,
        show_progress_bar=False,
    )
    return corpus, tmp_path / "emb"


def test_import_into_faiss_and_milvus(tiny_model, encoded, tmp_path):
    corpus, emb = encoded
    kwargs = {"query_instruction": INSTRUCTION, "show_progress_bar": False}
    faiss = import_encoded(emb, corpus, tmp_path / "faiss", index_type="HNSW8", **kwargs)
    milvus = import_encoded(emb, corpus, f"milvus:{tmp_path}/idx.db", **kwargs)
    ids, embeddings = load_corpus_embeddings(emb)
    assert len(faiss) == len(milvus) == len(ids) == 7 and faiss.factory == "HNSW8"
    # every record is one chunk, found first by its own embedding, with its text (title in front)
    _, f_top = faiss.search(embeddings, 1)
    _, m_top = milvus.search(embeddings, 1)
    assert [faiss.chunk(int(i)).doc_id for i in f_top[:, 0]] == [str(i) for i in ids]
    assert m_top[:, 0].tolist() == [chunk_key(f"{i}#0") for i in ids]
    assert milvus.text(chunk_key("france#0")) == faiss.text(0) == f"{DOCS[0]['title']} {DOCS[0]['text']}"
    # queries are embedded with encode's settings and the given instruction
    queries = milvus.encode_queries(tiny_model, ["capital of France"])
    expected = tiny_model.encode_query(["capital of France"], instruction=INSTRUCTION, method="mean", max_length=64)
    np.testing.assert_allclose(queries, expected, atol=1e-5)
    np.testing.assert_allclose(faiss.encode_queries(tiny_model, ["capital of France"]), queries)
    f_scores, f_ids = faiss.search(queries, 7)
    m_scores, m_ids = milvus.search(queries, 7)
    assert [faiss.chunk(int(i)).id for i in f_ids[0]] == [milvus.chunk(int(i)).id for i in m_ids[0]]
    np.testing.assert_allclose(m_scores, f_scores, atol=1e-5)
    assert open_index(f"milvus:{tmp_path}/idx.db").manifest["imported_from"] == str(emb.resolve())


def test_an_interrupted_milvus_import_resumes_without_duplicates(encoded, tmp_path, monkeypatch):
    corpus, emb = encoded
    where = f"milvus:{tmp_path}/idx.db"
    calls: list[int] = []
    real_upsert = MilvusStore.upsert

    def crash_on_third_shard(self, records, *args, **kwargs):
        calls.append(len(records))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_upsert(self, records, *args, **kwargs)

    monkeypatch.setattr(MilvusStore, "upsert", crash_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        import_encoded(emb, corpus, where, show_progress_bar=False)
    assert len(MilvusStore.open(where, allow_incomplete=True)) == 4  # shards 0 and 1
    calls.clear()
    resumed = import_encoded(emb, corpus, where, show_progress_bar=False)
    assert calls == [2, 1] and len(resumed) == 7  # shards 2 and 3 only; 7 records, none twice
    assert sorted(c.doc_id for c in resumed.query("number == 0")) == sorted(d["id"] for d in DOCS + MORE)


def test_import_checks_its_inputs(encoded, tmp_path):
    corpus, emb = encoded
    with pytest.raises(FileNotFoundError, match="is not an output folder of `genembed encode`"):
        import_encoded(tmp_path, corpus, tmp_path / "x", show_progress_bar=False)
    other = write_jsonl(tmp_path / "other.jsonl", DOCS)
    with pytest.raises(ValueError, match=r"other\.jsonl has .* bytes, but .* was encoded from a file of"):
        import_encoded(emb, other, tmp_path / "x", show_progress_bar=False)
    rows = DOCS + MORE  # the same bytes with two records swapped: caught by the ids
    swapped = write_jsonl(tmp_path / "swapped.jsonl", [rows[1], rows[0], *rows[2:]])
    assert swapped.stat().st_size == corpus.stat().st_size
    with pytest.raises(ValueError, match=r"record 0 does not match shard 0 .*\['fox'\] vs \['france'\]"):
        import_encoded(emb, swapped, tmp_path / "x", show_progress_bar=False)
    config = json.loads((emb / "config.json").read_text())
    (emb / "config.json").write_text(json.dumps({**config, "normalize": False}))
    with pytest.raises(ValueError, match="--no-normalize"):
        import_encoded(emb, corpus, tmp_path / "x", show_progress_bar=False)


def test_a_faiss_import_reads_the_shards_in_place(tiny_model, encoded, tmp_path, monkeypatch):
    from genembed.retrieval import faiss_store

    corpus, emb = encoded
    monkeypatch.setattr(faiss_store, "atomic_write_npy", lambda *a: pytest.fail("a shard was copied"))
    index = import_encoded(emb, corpus, tmp_path / "faiss", show_progress_bar=False)
    ids, embeddings = load_corpus_embeddings(emb)
    assert len(index) == len(ids) and not (tmp_path / "faiss" / ".build").exists()
    np.testing.assert_array_equal(index.faiss_index.reconstruct_n(0, len(ids)), embeddings)
