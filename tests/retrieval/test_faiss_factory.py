"""Approximate faiss indexes: any index_factory string, trained on a sample, search parameters exposed."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from genembed.encoders.settings import EmbedSettings
from genembed.retrieval import index_build
from genembed.retrieval.faiss_factory import (
    add_blocks,
    apply_search_params,
    new_faiss_index,
    parse_search_params,
    train_on_sample,
)
from genembed.retrieval.faiss_store import FaissStore
from genembed.retrieval.index_build import add_to_index, build_index

SMALL = {"chunk_tokens": 12, "overlap": 3, "show_progress_bar": False, "config": EmbedSettings(method="mean")}


def _unit(rng, n, d=16):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_index_from_a_factory_string_trains_on_a_sample_of_the_shards():
    rng = np.random.default_rng(0)
    shards = [_unit(rng, 300), _unit(rng, 200), _unit(rng, 500)]
    index = new_faiss_index(16, "IVF8,Flat")
    assert index.metric_type == faiss.METRIC_INNER_PRODUCT and not index.is_trained
    assert train_on_sample(index, shards, sample=400, seed=1) == 400 and index.is_trained
    assert add_blocks(index, shards, block=128) == 1000 and index.ntotal == 1000
    apply_search_params(index, {"nprobe": 8})  # every list: exact
    exact = new_faiss_index(16)
    assert train_on_sample(exact, shards) == 0  # nothing to train
    add_blocks(exact, shards)
    queries = _unit(rng, 5)
    np.testing.assert_array_equal(index.search(queries, 10)[1], exact.search(queries, 10)[1])
    with pytest.raises(ValueError, match="has no search parameter 'efSearch'"):
        apply_search_params(index, {"efSearch": 64})
    with pytest.raises(ValueError, match=r"cannot train faiss index 'IVF64,Flat' on 20 vectors \(.*clusters"):
        train_on_sample(new_faiss_index(16, "IVF64,Flat"), [shards[0][:20]], factory="IVF64,Flat")


def test_search_params_parse():
    assert parse_search_params(["efSearch=128", "nprobe = 16", "k_factor=1.5"]) == {
        "efSearch": 128,
        "nprobe": 16,
        "k_factor": 1.5,
    }
    assert parse_search_params(None) == {} and parse_search_params({"ef": "64"}) == {"ef": 64}
    with pytest.raises(ValueError, match=r"written name=value .* got 'efSearch'"):
        parse_search_params(["efSearch"])
    with pytest.raises(ValueError, match="'nprobe' needs a number, got 'many'"):
        parse_search_params(["nprobe=many"])


def test_build_and_add_with_an_hnsw_index(tiny_model, docs_file, more_file, tmp_path):
    flat = build_index(tiny_model, [docs_file], tmp_path / "flat", **SMALL)
    hnsw = build_index(
        tiny_model, [docs_file], tmp_path / "hnsw", index_type="HNSW8", search_params={"efSearch": 40}, **SMALL
    )
    assert hnsw.factory == "HNSW8" and flat.factory == "Flat"
    loaded = FaissStore.load(tmp_path / "hnsw")
    assert faiss.downcast_index(loaded.faiss_index).hnsw.efSearch == 40  # stored parameters set on load
    queries = flat.encode_queries(tiny_model, ["capital of France", "guitar"])
    np.testing.assert_array_equal(loaded.search(queries, 5)[1], flat.search(queries, 5)[1])  # tiny: exact
    loaded.search(queries, 5, params={"efSearch": 16})
    assert faiss.downcast_index(loaded.faiss_index).hnsw.efSearch == 16
    grown = add_to_index(tiny_model, tmp_path / "hnsw", [more_file], show_progress_bar=False)
    assert grown.factory == "HNSW8" and grown.faiss_index.ntotal == len(grown) > len(flat)
    with pytest.raises(ValueError, match="no search parameter 'nprobe'"):
        grown.set_search_params(["nprobe=4"])


def test_bad_factory_strings_and_parameters_fail_before_embedding(tiny_model, docs_file, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="faiss cannot build index 'IVF-PQ'"):
        build_index(tiny_model, [docs_file], tmp_path / "bad", index_type="IVF-PQ", **SMALL)
    with pytest.raises(ValueError, match=r"\(IndexFlatIP\) has no search parameter 'efSearch'"):
        build_index(tiny_model, [docs_file], tmp_path / "bad", search_params={"efSearch": 8}, **SMALL)
    assert not (tmp_path / "bad").exists()


def test_too_few_vectors_to_train_keeps_the_embeddings_for_a_rerun(tiny_model, docs_file, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="cannot train faiss index 'IVF64,Flat' on 14 vectors"):
        build_index(tiny_model, [docs_file], tmp_path / "idx", index_type="IVF64,Flat", **SMALL)
    calls: list[int] = []
    real_encode = index_build.encode_with_kv
    monkeypatch.setattr(index_build, "encode_with_kv", lambda *a, **k: calls.append(1) or real_encode(*a, **k))
    index = build_index(tiny_model, [docs_file], tmp_path / "idx", index_type="IVF2,Flat", **SMALL)
    assert calls == [] and index.factory == "IVF2,Flat" and index.faiss_index.ntotal == 14  # nothing re-embedded
