"""One output pipeline (centre -> truncate -> normalise -> quantise) for every caller: each path that turns
raw embeddings into vectors gives what ``model.encode`` gives for the same texts and settings."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from genembed.encoders.output import OutputPipeline
from genembed.encoders.quantize import PRECISIONS, quantize_embeddings
from genembed.encoders.settings import IndexEmbedSettings
from genembed.model import GenerativeEmbedder

TEXTS = ["The quick brown fox.", "Paris is the capital of France.", "I loved this film.", "Tax law is complex."]
INSTRUCTION = "Retrieve relevant passages."
ON_OFF = [False, True]
DIMS = [None, 12]


def _model(backbone, *, center: bool, truncate_dim: int | None) -> GenerativeEmbedder:
    # mean pooling: one pass per batch keeps the matrix quick; centring and truncation do not depend on it
    return GenerativeEmbedder(copy.deepcopy(backbone), method="mean", center=center, truncate_dim=truncate_dim)


def _reference(model: GenerativeEmbedder, instruction: str = INSTRUCTION, **kwargs) -> np.ndarray:
    return model.encode(TEXTS, instruction=instruction, **kwargs)


def test_the_steps_run_in_sentence_transformers_order():
    raw = torch.randn(5, 16)
    shift = torch.randn(16) * 0.1
    got = OutputPipeline(truncate_dim=6, precision="int8").apply(raw, shift)
    centred = torch.nn.functional.normalize(raw, dim=-1) - shift
    expected = quantize_embeddings(torch.nn.functional.normalize(centred[:, :6], dim=-1), "int8")
    np.testing.assert_array_equal(got.numpy(), expected)
    assert OutputPipeline(truncate_dim=6).dim(16) == 6 and OutputPipeline(truncate_dim=60).dim(16) == 16
    unnormalised = OutputPipeline(normalize=False, truncate_dim=4).apply(raw)
    torch.testing.assert_close(unnormalised, raw[:, :4])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("center", "yes", "center must be True or False"),
        ("normalize", 1, "normalize must be True or False"),
        ("truncate_dim", 0, "truncate_dim must be a positive int"),
        ("precision", "int4", "precision must be one of"),
    ],
)
def test_a_bad_step_is_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        OutputPipeline(**{field: value})


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"truncate_dim": 0}, "truncate_dim must be a positive int"),
        ({"precision": "int4"}, "precision must be one of"),
        ({"center": "yes"}, "center must be True or False"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"method": "mean", "share_prefix": True}, "share_prefix needs a soft-token method"),
    ],
)
def test_encode_refuses_a_bad_setting_before_any_work(_tiny_backbone, monkeypatch, keywords, message):
    """The call's settings (what decides the vectors, the speed switches, the steps after the core) are
    built and checked together before a text is tokenized or encoded."""
    import genembed._encoding as encoding

    def no_work(*args, **kwargs):
        raise AssertionError("encoded before the settings were checked")

    monkeypatch.setattr(encoding, "encode_texts", no_work)
    monkeypatch.setattr(encoding, "validate_texts", no_work)
    with pytest.raises(ValueError, match=message):
        _model(_tiny_backbone, center=False, truncate_dim=None).encode(TEXTS, **keywords)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("truncate_dim", DIMS)
@pytest.mark.parametrize("center", ON_OFF)
def test_encode_quantises_the_vectors_it_would_return_in_float32(_tiny_backbone, center, truncate_dim, precision):
    model = _model(_tiny_backbone, center=center, truncate_dim=truncate_dim)
    floats = _reference(model)
    assert floats.shape == (len(TEXTS), truncate_dim or model.dim)
    np.testing.assert_array_equal(_reference(model, precision=precision), quantize_embeddings(floats, precision))


@pytest.mark.parametrize("normalize", ON_OFF)
@pytest.mark.parametrize("truncate_dim", DIMS)
@pytest.mark.parametrize("center", ON_OFF)
def test_corpus_shards_hold_what_encode_returns(_tiny_backbone, tmp_path, center, truncate_dim, normalize):
    from genembed.encoders.corpus import encode_corpus, load_corpus_embeddings

    model = _model(_tiny_backbone, center=center, truncate_dim=truncate_dim)
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)), "utf-8")
    output = OutputPipeline.of(model, normalize=normalize)
    settings = model.embed_settings()
    encode_corpus(
        model.backbone, path, tmp_path / "out", settings, instruction=INSTRUCTION, output=output, shard_size=3,
        show_progress_bar=False,
    )  # fmt: skip
    _, got = load_corpus_embeddings(tmp_path / "out")
    np.testing.assert_allclose(got, _reference(model, normalize=normalize), atol=1e-5)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config.get("truncate_dim") == truncate_dim and config.get("center", False) is center
    with pytest.raises(ValueError, match="corpus shards are float32"):
        encode_corpus(model.backbone, path, tmp_path / "q", settings, output=output.replace(precision="int8"))


@pytest.mark.parametrize("truncate_dim", DIMS)
@pytest.mark.parametrize("center", ON_OFF)
def test_kv_embedding_and_an_index_give_what_encode_returns(_tiny_backbone, tmp_path, center, truncate_dim):
    from genembed.retrieval.faiss_store import FaissStore
    from genembed.retrieval.index_build import build_index
    from genembed.retrieval.kv_embed import encode_with_kv

    model = _model(_tiny_backbone, center=center, truncate_dim=truncate_dim)
    settings = IndexEmbedSettings(
        embed=model.embed_settings(), center=center, truncate_dim=truncate_dim, doc_instruction=INSTRUCTION
    )
    for keep_kv in ON_OFF:
        got = encode_with_kv(model.backbone, TEXTS, settings, kind="doc", keep_kv=keep_kv).embeddings
        np.testing.assert_allclose(got, _reference(model), atol=1e-5)

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)), "utf-8")
    build_index(model, [path], tmp_path / "idx", chunk_tokens=64, overlap=3, show_progress_bar=False)
    index = FaissStore.load(tmp_path / "idx")
    assert index.settings.center is center and index.settings.truncate_dim == truncate_dim
    assert index.dim == (truncate_dim or model.dim)
    queries = index.encode_queries(model, TEXTS[:2])
    expected = _reference(model, instruction=index.settings.query_instruction)[:2]
    np.testing.assert_allclose(queries, expected, atol=1e-5)
    assert [hit.text for hit in model.search(TEXTS[1], index, k=1, rerank=False)] == [TEXTS[1]]


@pytest.mark.parametrize("truncate_dim", DIMS)
@pytest.mark.parametrize("center", ON_OFF)
def test_the_server_returns_what_encode_returns(_tiny_backbone, center, truncate_dim):
    from fastapi.testclient import TestClient

    from genembed.serve import ServeSettings, create_app

    model = _model(_tiny_backbone, center=center, truncate_dim=truncate_dim)
    with TestClient(create_app(model, ServeSettings())) as client:
        response = client.post("/v1/embeddings", json={"input": TEXTS, "instruction": INSTRUCTION})
    assert response.status_code == 200, response.text
    got = np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)
    reference = _model(_tiny_backbone, center=center, truncate_dim=truncate_dim)  # the server's was used
    np.testing.assert_allclose(got, _reference(reference), atol=1e-5)


@pytest.mark.parametrize("cached", ON_OFF)
@pytest.mark.parametrize("truncate_dim", DIMS)
@pytest.mark.parametrize("center", ON_OFF)
def test_evaluation_embeds_what_encode_returns(_tiny_backbone, tmp_path, center, truncate_dim, cached):
    from genembed.eval.embedding_cache import EmbeddingCache
    from genembed.eval.encoders import GenembedEncoder
    from genembed.eval.encoding import TextEmbedder

    model = _model(_tiny_backbone, center=center, truncate_dim=truncate_dim)
    cache = EmbeddingCache(tmp_path / "emb.sqlite") if cached else None
    embedder = TextEmbedder(GenembedEncoder(model, method="mean"), cache, progress=False)
    for _ in range(2):  # the second time from the cache, when there is one
        got = embedder(TEXTS, INSTRUCTION)
        assert got.shape == (len(TEXTS), 1, truncate_dim or model.dim)
        np.testing.assert_allclose(got[:, 0], _reference(model), atol=1e-5)


def test_index_settings_record_truncate_dim_only_when_set():
    whole = IndexEmbedSettings().to_dict()
    assert "truncate_dim" not in whole  # what indexes built before it hold
    kept = IndexEmbedSettings(truncate_dim=8)
    assert kept.to_dict()["truncate_dim"] == 8 and IndexEmbedSettings.from_dict(kept.to_dict()) == kept
    assert OutputPipeline.of_index(kept) == OutputPipeline(truncate_dim=8)
