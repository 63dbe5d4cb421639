from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from genembed.encoders.settings import EmbedSettings
from genembed.retrieval import index_build
from genembed.retrieval.errors import IndexCorruptedError, IndexIncompleteError, IndexVersionError
from genembed.retrieval.faiss_store import MANIFEST, FaissStore
from genembed.retrieval.index_build import add_to_index, build_index
from genembed.retrieval.kv_embed import encode_with_kv
from genembed.retrieval.kv_segment import segment_states

SMALL = {"chunk_tokens": 12, "overlap": 3, "show_progress_bar": False}


def _build(model, sources, out, **kwargs):
    return build_index(model, sources, out, **{**SMALL, **kwargs})


def _generation_states(model, index, row):
    """Chunk ``row``'s passage segment computed after the RAG prompt's head by the generator."""
    tok, prompt = model.backbone.tokenizer, index.rag_prompt
    return segment_states(model, prompt.head_ids(tok), prompt.passage_ids(tok, [index.text(row)]))[1][0]


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [("gircse", {"steps": 3}), ("mean", {}), ("grit", {}), ("last", {"attention": "bidirectional"})],
)
def test_index_embeddings_and_kv_match_the_model(tiny_model, method, kwargs):
    texts = ["Paris is the capital of France.", "A man is playing a guitar.", "ok"]
    config = EmbedSettings(method=method, **kwargs)
    out = encode_with_kv(tiny_model.backbone, texts, config, kind="query", batch_size=2)
    encode_kwargs = {k: v for k, v in kwargs.items() if k in ("steps", "attention")}
    expected = tiny_model.encode_query(texts, method=method, **encode_kwargs)
    np.testing.assert_allclose(out.embeddings, expected, atol=1e-5)
    # each text's KV states are those of its prompt encoded alone (batching and padding change nothing)
    from genembed.retrieval.kv_ops import encode_segment

    for ids, (keys, values) in zip(out.ids, out.kv, strict=True):
        ref_k, ref_v = encode_segment(tiny_model.backbone.model, ids, attention=config.attention)
        torch.testing.assert_close(keys, ref_k, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(values, ref_v, atol=1e-5, rtol=1e-4)


def test_index_round_trips_through_save_and_load(tiny_model, docs_file, tmp_path):
    built = _build(tiny_model, [docs_file], tmp_path / "idx", store_kv=True, kv_dtype="bfloat16")
    loaded = FaissStore.load(tmp_path / "idx")
    assert len(loaded) == len(built) > 5 and loaded.chunks == built.chunks
    assert loaded.settings == built.settings and loaded.manifest == built.manifest
    queries = loaded.encode_queries(tiny_model, ["capital of France", "guitar on stage"])
    scores, ids = loaded.search(queries, k=4)
    expected_scores, expected_ids = built.search(queries, k=4)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores)
    # search scores are the cosines of the chunks' embeddings (re-embedded here)
    docs = encode_with_kv(tiny_model.backbone, [loaded.text(int(i)) for i in ids[0]], loaded.settings, keep_kv=False)
    np.testing.assert_allclose(scores[0], docs.embeddings @ queries[0], atol=1e-5)
    assert loaded.text(0) == f"{loaded.chunk(0).title} {loaded.chunk(0).text}"
    # KV states come back (memory-mapped, in the stored dtype) equal to the generator's pass over the passage
    fresh = _generation_states(tiny_model, loaded, 3)
    keys, values = loaded.kv(3)
    assert keys.dtype == torch.bfloat16 and keys.shape[2] == fresh[0].shape[2]
    torch.testing.assert_close(keys.float(), fresh[0], atol=0.05, rtol=0.02)  # bf16 rounding
    torch.testing.assert_close(values.float(), fresh[1], atol=0.05, rtol=0.02)
    scores, ids = loaded.search(queries[:1], k=len(loaded) + 2)  # past the end: -1 ids, as search() expects
    assert sorted(ids[0, : len(loaded)]) == list(range(len(loaded))) and list(ids[0, -2:]) == [-1, -1]
    assert np.isneginf(scores[0, -2:]).all()


def test_add_appends_chunks_and_kv(tiny_model, docs_file, more_file, tmp_path):
    base = _build(tiny_model, [docs_file], tmp_path / "idx", store_kv=True, kv_dtype="float32")
    old_chunks, n_old = base.chunks, len(base)
    grown = add_to_index(tiny_model, tmp_path / "idx", [more_file], show_progress_bar=False)
    assert grown.chunks[:n_old] == old_chunks and {c.doc_id for c in grown.chunks[n_old:]} == {"retrieve", "similar"}
    assert [c.row for c in grown.chunks] == list(range(len(grown)))
    reloaded = FaissStore.load(tmp_path / "idx")
    assert reloaded.manifest["generation"] == 2 and len(reloaded) == len(grown)
    assert sorted(p.name for p in (tmp_path / "idx").glob("*-*.*")) == ["chunks-00002.jsonl", "index-00002.faiss"]
    # a new chunk is found by its own embedding, and its KV states are stored
    new_row = n_old
    own = encode_with_kv(tiny_model.backbone, [reloaded.text(new_row)], reloaded.settings)
    assert reloaded.search(own.embeddings, k=1)[1][0, 0] == new_row
    torch.testing.assert_close(reloaded.kv(new_row)[0], _generation_states(tiny_model, reloaded, new_row)[0])
    torch.testing.assert_close(reloaded.kv(0)[0], base.kv(0)[0])
    with pytest.raises(ValueError, match="document id 'retrieve' is already in the index"):
        add_to_index(tiny_model, tmp_path / "idx", [more_file], show_progress_bar=False)


def test_an_interrupted_build_resumes_where_it_stopped(tiny_model, docs_file, tmp_path, monkeypatch):
    reference = _build(tiny_model, [docs_file], tmp_path / "ref", store_kv=True, kv_dtype="float32", shard_size=4)
    n_shards = -(-len(reference) // 4)
    assert n_shards >= 3
    calls: list[int] = []
    real_encode = index_build.encode_with_kv

    def crash_on_third_shard(backbone, texts, *args, **kwargs):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt  # like Ctrl-C in the middle of the build
        return real_encode(backbone, texts, *args, **kwargs)

    monkeypatch.setattr(index_build, "encode_with_kv", crash_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        _build(tiny_model, [docs_file], tmp_path / "idx", store_kv=True, kv_dtype="float32", shard_size=4)
    with pytest.raises(IndexIncompleteError, match="rerun the same `genembed index build` command"):
        FaissStore.load(tmp_path / "idx")
    calls.clear()
    monkeypatch.setattr(index_build, "encode_with_kv", lambda *a, **k: calls.append(1) or real_encode(*a, **k))
    resumed = _build(tiny_model, [docs_file], tmp_path / "idx", store_kv=True, kv_dtype="float32", shard_size=4)
    assert len(calls) == n_shards - 2  # the two finished shards were not embedded again
    assert resumed.chunks == reference.chunks
    queries = resumed.encode_queries(tiny_model, ["capital of France"])
    np.testing.assert_array_equal(resumed.search(queries, 5)[1], reference.search(queries, 5)[1])
    for row in range(len(resumed)):
        torch.testing.assert_close(resumed.kv(row)[0], reference.kv(row)[0])
    assert not (tmp_path / "idx" / ".build").exists()


def test_a_pending_build_with_other_sources_is_not_mixed_in(tiny_model, docs_file, more_file, tmp_path, monkeypatch):
    monkeypatch.setattr(index_build, "encode_with_kv", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        _build(tiny_model, [docs_file], tmp_path / "idx")
    monkeypatch.undo()
    with pytest.raises(FileExistsError, match="interrupted build or add with other sources"):
        _build(tiny_model, [more_file], tmp_path / "idx")
    assert len(_build(tiny_model, [more_file], tmp_path / "idx", overwrite=True)) > 0


def test_existing_index_and_foreign_folders_are_protected(tiny_model, docs_file, tmp_path):
    _build(tiny_model, [docs_file], tmp_path / "idx")
    with pytest.raises(FileExistsError, match="already holds an index"):
        _build(tiny_model, [docs_file], tmp_path / "idx")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("keep me")
    with pytest.raises(FileExistsError, match="not an index folder"):
        _build(tiny_model, [docs_file], tmp_path / "other")


@pytest.fixture
def built(tiny_model, docs_file, tmp_path):
    _build(tiny_model, [docs_file], tmp_path / "idx", store_kv=True)
    return tmp_path / "idx"


def _edit_manifest(path, **changes):
    manifest = json.loads((path / MANIFEST).read_text())
    manifest.update(changes)
    (path / MANIFEST).write_text(json.dumps(manifest))
    return manifest


def test_version_mismatch_is_a_clear_error(built):
    _edit_manifest(built, format_version=99)
    with pytest.raises(IndexVersionError, match="index format version 99; this genembed reads version 1"):
        FaissStore.load(built)


@pytest.mark.parametrize("damage", ["faiss", "chunks", "manifest", "kv", "count", "missing"])
def test_corruption_is_a_clear_error(built, damage):
    manifest = json.loads((built / MANIFEST).read_text())
    path = built / MANIFEST
    if damage == "faiss":
        path = built / manifest["files"]["faiss"]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        match = "does not match its checksum"
    elif damage == "chunks":
        path = built / manifest["files"]["chunks"]
        path.write_text(path.read_text()[:-40])
        match = "does not match its checksum"
    elif damage == "manifest":
        (built / MANIFEST).write_text('{"format": "genembed-index", ')
        match = "manifest.json is not valid JSON"
    elif damage == "kv":
        path = built / manifest["kv"]["shards"][0]["file"]
        path.write_bytes(path.read_bytes()[:100])
        match = "is missing or has the wrong size"
    elif damage == "count":
        _edit_manifest(built, n_chunks=manifest["n_chunks"] + 1)
        path, match = built, "manifest says .* chunks"
    else:
        path = built / manifest["files"]["faiss"]
        path.unlink()
        match = "is missing"
    with pytest.raises(IndexCorruptedError, match=match) as caught:
        FaissStore.load(built)
    assert str(path) in str(caught.value) and f"--out {built} --overwrite" in str(caught.value)


def test_damage_found_without_checksums_names_the_file_and_line(built):
    manifest = json.loads((built / MANIFEST).read_text())
    chunks = built / manifest["files"]["chunks"]
    lines = chunks.read_text().splitlines()
    chunks.write_text("\n".join([*lines[:2], lines[2][:30], *lines[3:]]) + "\n")  # a torn record
    with pytest.raises(IndexCorruptedError, match=rf"{chunks}:3: not a chunk record"):
        FaissStore.load(built, verify=False)
    chunks.write_text("\n".join(lines[:-1]) + "\n")  # a lost last record
    with pytest.raises(IndexCorruptedError, match=rf"{chunks.name} has {len(lines) - 1}"):
        FaissStore.load(built, verify=False)


def test_a_damaged_kv_shard_names_itself_when_read(built):
    index = FaissStore.load(built)
    shard = built / index.manifest["kv"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[8:12] = b"\xff\xfe\x00{"  # inside the JSON header: same size, unreadable
    shard.write_bytes(bytes(data))
    index = FaissStore.load(built)  # the size matches: found when the states are read
    with pytest.raises(IndexCorruptedError, match="KV shard .* cannot be opened") as caught:
        index.kv(0)
    assert str(shard) in str(caught.value) and "Rebuild the index" in str(caught.value)


def test_a_damaged_shard_of_an_interrupted_build_names_itself(tiny_model, docs_file, tmp_path, monkeypatch):
    from genembed._files import DamagedFileError

    real_encode = index_build.encode_with_kv
    calls: list[int] = []

    def crash_on_second_shard(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(index_build, "encode_with_kv", crash_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        _build(tiny_model, [docs_file], tmp_path / "idx", shard_size=4)
    monkeypatch.undo()
    emb = tmp_path / "idx" / ".build" / "emb-00000.npy"
    data = bytearray(emb.read_bytes())
    data[-1] ^= 0x01
    emb.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="does not match its checksum") as caught:
        _build(tiny_model, [docs_file], tmp_path / "idx", shard_size=4)
    assert str(emb) in str(caught.value) and f"Delete {tmp_path / 'idx' / '.build'} and rerun" in str(caught.value)
    shutil.rmtree(tmp_path / "idx" / ".build")
    assert len(_build(tiny_model, [docs_file], tmp_path / "idx", shard_size=4)) > 4


def test_not_an_index(tmp_path):
    with pytest.raises(FileNotFoundError):
        FaissStore.load(tmp_path / "nope")
    with pytest.raises(IndexCorruptedError, match="not a genembed index"):
        FaissStore.load(tmp_path)


def test_search_rejects_bad_queries(built):
    index = FaissStore.load(built)
    with pytest.raises(ValueError, match=r"shape \(n, 32\)"):
        index.search(np.zeros((1, 7), dtype=np.float32), 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        index.search(np.zeros((1, 32), dtype=np.float32), 0)


def test_index_belongs_to_its_model(built):
    from genembed.backbone import tiny_backbone
    from genembed.model import GenerativeEmbedder

    other = GenerativeEmbedder(tiny_backbone(seed=1))
    with pytest.raises(ValueError, match="was built with model 'tiny-llama-0'"):
        FaissStore.load(built).encode_queries(other, ["x"])


def test_an_index_built_under_the_shipped_adapters_former_name_opens_with_it_renamed(tiny_model, docs_file, tmp_path):
    import copy

    tiny_model.adapter = "smollm2-135m-gircse"  # the shipped adapter's folder before it was named for what it is
    index = _build(tiny_model, [docs_file], tmp_path / "idx")
    renamed = copy.copy(tiny_model)
    renamed.adapter = "smollm2-135m-joint"
    np.testing.assert_array_equal(index.encode_queries(renamed, ["x"]), index.encode_queries(tiny_model, ["x"]))
    renamed.adapter = "my-lora"
    with pytest.raises(ValueError, match=r"was built with model 'tiny-llama-0\+smollm2-135m-gircse'"):
        index.encode_queries(renamed, ["x"])


def test_kv_store_reads_lengths_from_the_header(tiny_model, docs_file, tmp_path):
    index = _build(tiny_model, [docs_file], tmp_path / "idx", store_kv=True)
    assert [index.kv_store.tokens(r) for r in range(len(index))] == [index.kv(r)[0].shape[2] for r in range(len(index))]


def test_the_faiss_store_through_the_protocol(tiny_model, docs_file, tmp_path):
    from dataclasses import replace

    from genembed.retrieval.stores import open_index

    built = _build(tiny_model, [docs_file], tmp_path / "idx")
    store = open_index(tmp_path / "idx")
    n = len(store)
    originals = [store.chunk(i) for i in range(3)]
    copies = [replace(r, row=n + i, id=f"copy#{i}", doc_id="copy") for i, r in enumerate(originals)]
    vectors = built.faiss_index.reconstruct_n(0, 3)
    store.prepare_documents({"copy": 3})  # a new document id is accepted, a known one refused
    with pytest.raises(ValueError, match=f"document id '{originals[0].doc_id}' is already in the index"):
        store.prepare_documents({originals[0].doc_id: 1})
    assert store.add(copies, vectors) == 3 and len(store) == n  # staged until save
    store.update_manifest(sources=["extra"])
    store.save()
    again = open_index(tmp_path / "idx")
    assert len(again) == n + 3 and again.manifest["generation"] == 2 and again.manifest["sources"] == ["extra"]
    scores, keys = again.search(vectors[:1], 2)
    assert {again.chunk(int(k)).id for k in keys[0]} == {originals[0].id, "copy#0"}
    np.testing.assert_allclose(scores[0], [1.0, 1.0], atol=1e-5)
    with pytest.raises(ValueError, match="deleting needs a Milvus store"):
        again.delete(doc_ids=["copy"])
    with pytest.raises(ValueError, match="cannot replace chunks"):
        again.upsert(copies, vectors)
    with pytest.raises(ValueError, match=f"new chunks take consecutive rows from {n + 3}, got rows from {n}"):
        again.add(copies, vectors)
    with pytest.raises(ValueError, match="does not store KV states"):
        again.add(copies, vectors, kv=[(torch.zeros(1), torch.zeros(1))] * 3)
    rows = dict(again.describe())
    assert rows["chunks"] == f"{n + 3:,} from {len({c.doc_id for c in again.chunks}):,} documents"
    assert rows["vector index"] == "faiss Flat, inner product" and rows["generation"].startswith("2 (updated")


def test_config_is_the_deprecated_name_of_settings(tiny_model, tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("Paris is the capital of France.")
    settings = tiny_model.embed_settings(method="mean")
    with pytest.warns(DeprecationWarning, match=r"build_index\(config=...\) is deprecated: pass settings="):
        index = build_index(tiny_model, [docs], tmp_path / "idx", config=settings, show_progress_bar=False)
    assert index.settings.method == "mean"
    with pytest.warns(DeprecationWarning, match=r"\.config is deprecated: use \.settings"):
        assert index.config == index.settings
    with pytest.raises(TypeError, match="not both"):
        build_index(tiny_model, [docs], tmp_path / "other", settings=settings, config=settings)
