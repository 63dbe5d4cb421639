"""Per-instruction centering: the center's definition, its use in every embedding path, and defaults."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from genembed.encoders import EmbedSettings, encode_texts
from genembed.encoders.center_files import CENTERS_FILE, write_centers
from genembed.encoders.centering import (
    apply_center,
    calibration_digest,
    calibration_texts,
    clear_centers,
    instruction_center,
)

TEXTS = ["The quick brown fox.", "A man is playing a guitar.", "Paris is the capital of France.", "x"]
INSTRUCTION = "Classify the emotion expressed in the given text."


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_calibration_texts_ship_with_the_package():
    texts = calibration_texts()
    assert len(texts) == 64 and len(set(texts)) == 64
    assert all(5 <= len(t.split()) <= 40 for t in texts)
    import genembed

    assert (Path(genembed.__file__).parent / "data" / "calibration.txt").is_file()


@pytest.mark.parametrize(("method", "all_steps"), [("gircse", False), ("gircse", True), ("mean", False)])
def test_the_center_is_the_mean_unit_calibration_embedding(tiny, method, all_steps):
    options = EmbedSettings.build(method=method, steps=3)
    raw, _ = encode_texts(tiny, list(calibration_texts()), options, instruction=INSTRUCTION, return_all_steps=all_steps)
    expected = torch.nn.functional.normalize(raw, dim=-1).mean(dim=0)
    got = instruction_center(tiny, options, INSTRUCTION, all_steps=all_steps)
    assert got.shape == ((3, tiny.model.config.hidden_size) if all_steps else (tiny.model.config.hidden_size,))
    torch.testing.assert_close(got, expected)
    # memoised per model and the settings that decide embeddings (equal settings made anew find it)
    again = EmbedSettings.build(method=method, steps=3)
    assert instruction_center(tiny, again, INSTRUCTION, all_steps=all_steps) is got
    assert not torch.allclose(
        instruction_center(tiny, options, "", all_steps=all_steps), got
    )  # an instruction has its own
    clear_centers(tiny)
    assert instruction_center(tiny, options, INSTRUCTION, all_steps=all_steps) is not got


def test_the_calibration_set_centered_has_mean_zero(tiny_model):
    out = tiny_model.encode(list(calibration_texts()), instruction=INSTRUCTION, steps=2, center=True, normalize=False)
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-6)
    # and the shared direction it removes is large: the raw unit vectors are far from mean zero
    raw = tiny_model.encode(list(calibration_texts()), instruction=INSTRUCTION, steps=2)
    assert np.linalg.norm(raw.mean(axis=0)) > 0.3


@pytest.mark.parametrize("method", ["gircse", "mean", "last", "grit"])
def test_encode_subtracts_the_instruction_center(tiny_model, method):
    raw = tiny_model.encode(TEXTS, instruction=INSTRUCTION, method=method, steps=3)
    options = EmbedSettings.build(method=method, steps=3)
    shift = instruction_center(tiny_model.backbone, options, INSTRUCTION).numpy()
    got = tiny_model.encode(TEXTS, instruction=INSTRUCTION, method=method, steps=3, center=True)
    np.testing.assert_allclose(got, _unit(raw - shift), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    one = tiny_model.encode(TEXTS[1], instruction=INSTRUCTION, method=method, steps=3, center=True)
    np.testing.assert_allclose(one, got[1], atol=1e-5)


def test_every_step_of_a_sweep_is_centered_like_a_separate_run(tiny_model):
    sweep = tiny_model.encode(TEXTS, steps=4, return_all_steps=True, center=True)
    assert sweep.shape == (len(TEXTS), 4, tiny_model.dim)
    for k in (1, 2, 4):
        np.testing.assert_allclose(sweep[:, k - 1], tiny_model.encode(TEXTS, steps=k, center=True), atol=1e-5)


def test_adaptive_steps_are_centered(tiny_model):
    got, used = tiny_model.encode(TEXTS, steps="auto", max_steps=4, center=True, return_steps_used=True)
    raw = tiny_model.encode(TEXTS, steps="auto", max_steps=4)
    shift = instruction_center(tiny_model.backbone, EmbedSettings.build(steps="auto", max_steps=4), "").numpy()
    np.testing.assert_allclose(got, _unit(raw - shift), atol=1e-5)
    assert used.shape == (len(TEXTS),)


def test_the_model_default_and_the_per_call_override(tiny_model):
    plain = tiny_model.encode(TEXTS)
    assert tiny_model.center is False
    tiny_model.center = True
    centered = tiny_model.encode(TEXTS)
    np.testing.assert_allclose(centered, tiny_model.encode(TEXTS, center=True), atol=1e-6)
    np.testing.assert_allclose(tiny_model.encode(TEXTS, center=False), plain, atol=1e-6)
    assert np.abs(centered - plain).max() > 1e-2
    assert "center=True" in repr(tiny_model)
    # queries and documents take their own instruction's center
    q = tiny_model.encode_query(TEXTS)
    from genembed.model import DEFAULT_QUERY_INSTRUCTION

    np.testing.assert_allclose(q, tiny_model.encode(TEXTS, instruction=DEFAULT_QUERY_INSTRUCTION), atol=1e-6)
    np.testing.assert_allclose(tiny_model.encode_document(TEXTS), centered, atol=1e-6)


def test_apply_center_keeps_empty_input():
    assert apply_center(torch.zeros((0, 4)), torch.ones(4)).shape == (0, 4)


def test_load_centers_with_the_shipped_adapter_and_adapters_that_store_centers(tiny, monkeypatch, tmp_path):
    import genembed
    from genembed.models import adapters, assemble
    from genembed.models import load as loading

    monkeypatch.setattr(loading, "load_backbone", lambda *a, **k: tiny)
    monkeypatch.setattr(assemble, "attach_adapter", lambda backbone, path, **kw: None)
    monkeypatch.setattr(adapters, "adapter_folder", lambda path, what=None: path)  # folders without an adapter
    monkeypatch.setattr(adapters, "default_adapter", lambda: adapters.DEFAULT_ADAPTER)
    assert genembed.load().center is True
    assert genembed.load(adapter=adapters.DEFAULT_ADAPTER).center is True
    assert genembed.load(center=False).center is False
    assert genembed.load(adapter=False).center is False
    assert genembed.load(adapter=tmp_path).center is False
    assert genembed.load(adapter=tmp_path, center=True).center is True
    stored = tmp_path / "stored"
    stored.mkdir()
    write_centers(stored / CENTERS_FILE, {"any": torch.ones(4)}, calibration_digest())
    assert genembed.load(adapter=stored).center is True  # its author stored centers: it is used centred
    assert genembed.load(adapter=stored, center=False).center is False


def test_eval_caches_raw_embeddings_and_centers_after_lookup(tiny_model, tmp_path):
    from genembed.eval import EmbeddingCache, GenembedEncoder
    from genembed.eval.encoding import TextEmbedder

    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    plain = GenembedEncoder(tiny_model, steps="1,3")
    centered = GenembedEncoder(tiny_model, steps="1,3", center=True)
    assert centered.cache_key == plain.cache_key and centered.name == plain.name + " centered"
    assert centered.settings()["center"] is True and plain.center_for(INSTRUCTION) is None
    got = TextEmbedder(centered, cache, progress=False)(TEXTS, INSTRUCTION)  # (n, views, dim)
    for j, k in enumerate((1, 3)):
        np.testing.assert_allclose(
            got[:, j], tiny_model.encode(TEXTS, instruction=INSTRUCTION, steps=k, center=True), atol=1e-5
        )
    # the cache holds the raw vectors, so the un-centered encoder reads them back unchanged
    cached = cache.get(plain.cache_key, INSTRUCTION, 3, TEXTS)
    np.testing.assert_allclose(
        np.stack([cached[i] for i in range(len(TEXTS))]),
        tiny_model.encode(TEXTS, instruction=INSTRUCTION, steps=3),
        atol=1e-5,
    )
    again = TextEmbedder(plain, cache, progress=False)
    np.testing.assert_allclose(again(TEXTS, INSTRUCTION)[:, 1], np.stack([cached[i] for i in range(4)]), atol=1e-6)
    assert again.stats["encoded"] == 0


def test_eval_centers_come_from_the_cache_on_a_rerun(tiny_model, tmp_path, monkeypatch):
    from genembed.encoders import centering
    from genembed.eval import EmbeddingCache, GenembedEncoder
    from genembed.eval.encoding import TextEmbedder

    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    centered = GenembedEncoder(tiny_model, steps="1,3", center=True)
    first = TextEmbedder(centered, cache, progress=False)
    got = first(TEXTS, INSTRUCTION)
    assert first.stats["encoded"] == len(TEXTS)  # the calibration texts are not counted as the task's
    # the harness's center is the model's own: mean of the calibration texts' normalised embeddings
    np.testing.assert_allclose(first._center(INSTRUCTION), centered.center_for(INSTRUCTION), atol=1e-5)
    assert len(cache.get(centered.cache_key, INSTRUCTION, 3, list(centering.calibration_texts()))) == 64
    # without a cache the model's memoised center is used: the same embeddings
    np.testing.assert_allclose(TextEmbedder(centered, None, progress=False)(TEXTS, INSTRUCTION), got, atol=1e-5)

    def no_encoding(*args, **kwargs):
        raise AssertionError("a re-run encoded something")

    centering.clear_centers()
    monkeypatch.setattr(centering, "encode_texts", no_encoding)
    monkeypatch.setattr(tiny_model, "encode", no_encoding)
    again = TextEmbedder(GenembedEncoder(tiny_model, steps="1,3", center=True), cache, progress=False)
    np.testing.assert_allclose(again(TEXTS, INSTRUCTION), got, atol=1e-6)
    assert again.stats == {"texts": len(TEXTS), "encoded": 0, "cached": len(TEXTS), "encode_seconds": 0.0}


def test_corpus_encoding_centers_like_the_model(tiny_model, tmp_path):
    from genembed.encoders.corpus import encode_corpus, load_corpus_embeddings
    from genembed.encoders.output import OutputPipeline

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)), "utf-8")
    options = EmbedSettings.build(steps=2)
    centred = OutputPipeline(center=True)
    encode_corpus(tiny_model.backbone, path, tmp_path / "out", options, output=centred, show_progress_bar=False)
    _, embeddings = load_corpus_embeddings(tmp_path / "out")
    np.testing.assert_allclose(embeddings, tiny_model.encode(TEXTS, steps=2, center=True), atol=1e-5)
    with pytest.raises(ValueError, match="center differ"):
        encode_corpus(tiny_model.backbone, path, tmp_path / "out", options, show_progress_bar=False)


def test_an_index_built_by_a_centering_model_centers_queries_and_chunks(tiny_model, tmp_path):
    from genembed.retrieval.faiss_store import FaissStore
    from genembed.retrieval.index_build import build_index

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)), "utf-8")
    tiny_model.center = True
    build_index(tiny_model, [path], tmp_path / "idx", chunk_tokens=64, overlap=3, show_progress_bar=False)
    index = FaissStore.load(tmp_path / "idx")
    assert index.settings.center is True
    texts = [c.embed_text for c in index.chunks]
    assert sorted(texts) == sorted(TEXTS)
    # each chunk's stored vector is the model's centered document embedding: it finds itself at cosine 1
    scores, ids = index.search(tiny_model.encode_document(texts), 1)
    assert ids[:, 0].tolist() == list(range(len(texts)))
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-4)
    raw_scores, _ = index.search(tiny_model.encode_document(texts, center=False), 1)
    assert raw_scores.max() < 0.999
    np.testing.assert_allclose(index.encode_queries(tiny_model, TEXTS), tiny_model.encode_query(TEXTS), atol=1e-4)


def test_encode_cli_center_flag(tiny_model, tmp_path):
    from typer.testing import CliRunner

    from genembed.cli.app import app
    from genembed.encoders.corpus import load_corpus_embeddings

    folder = tmp_path / "tiny"
    tiny_model.backbone.model.save_pretrained(folder)
    tiny_model.backbone.tokenizer.save_pretrained(folder)
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)), "utf-8")
    for flag in ("--center", "--no-center"):
        out = tmp_path / flag
        args = ["encode", str(path), "--out", str(out), "--model", str(folder), "--steps", "2", flag, "-q"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        _, embeddings = load_corpus_embeddings(out)
        expected = tiny_model.encode(TEXTS, steps=2, center=flag == "--center")
        np.testing.assert_allclose(embeddings, expected, atol=1e-5)
