"""A model saved with its own method and K embeds with them on every path: the Python API, ``genembed
encode``, ``index build`` / ``index add`` / ``ask``, ``eval``, ``serve`` and the three framework
integrations give the vectors the API gives (``GenerativeEmbedder.embed_settings`` decides them once)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import genembed
from genembed.cli.app import app

runner = CliRunner()
TEXTS = ["the cat sat on the mat", "stock markets fell sharply", "a kitten naps on a rug"]
QUESTION = "where does the cat sit?"


@pytest.fixture(scope="module", params=[("mean", 5), ("gircse", 2)], ids=["mean", "gircse-K2"])
def saved(request, tiny_folder, tmp_path_factory):
    """The tiny model saved with a method and K other than the defaults (gircse, 5)."""
    model = genembed.load(tiny_folder)
    model.method, model.steps = request.param
    return model.save(tmp_path_factory.mktemp("saved") / "model"), model


def test_api_uses_the_saved_settings(saved):
    folder, model = saved
    loaded = genembed.load(folder)
    assert (loaded.method, loaded.steps) == (model.method, model.steps)
    expected = genembed.load(folder).encode(TEXTS, method=model.method, steps=model.steps)
    np.testing.assert_array_equal(loaded.encode(TEXTS), expected)
    defaults = loaded.encode(TEXTS, method="gircse", steps=5)
    assert not np.allclose(expected, defaults, atol=1e-3)  # the saved settings do change the vectors
    assert loaded.embed_settings().method == model.method  # what every other path builds on


def test_encode_command(saved, tmp_path):
    from genembed.encoders.corpus import load_corpus_embeddings

    folder, model = saved
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    result = runner.invoke(app, ["encode", str(source), "--out", str(tmp_path / "emb"), "--model", str(folder), "-q"])
    assert result.exit_code == 0, result.output
    _, vectors = load_corpus_embeddings(tmp_path / "emb")
    np.testing.assert_allclose(vectors, model.encode(TEXTS), atol=1e-5)


def _index_vectors(path):
    from genembed.retrieval.faiss_store import FaissStore

    index = FaissStore.load(path)
    return index, index.faiss_index.reconstruct_n(0, len(index))


def test_index_build_add_and_ask(saved, tmp_path):
    folder, model = saved
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text(TEXTS[0])
    second.write_text(TEXTS[1] + " " + TEXTS[2])
    out = tmp_path / "idx"
    build = ["index", "build", str(first), "--out", str(out), "--model", str(folder), "--chunk-tokens", "64"]
    result = runner.invoke(app, build)
    assert result.exit_code == 0, result.output
    index, _ = _index_vectors(out)
    assert (index.settings.method, index.settings.steps) == (model.method, model.steps)
    result = runner.invoke(app, ["index", "add", str(out), str(second), "--center"])  # one kind of vector per index
    assert result.exit_code == 2 and "was built without centering" in result.output, result.output
    result = runner.invoke(app, ["index", "add", str(out), str(second)])
    assert result.exit_code == 0, result.output
    index, vectors = _index_vectors(out)
    texts = [c.embed_text for c in index.chunks]
    assert len(texts) == 2
    np.testing.assert_allclose(vectors, model.encode(texts, instruction=""), atol=1e-5)

    result = runner.invoke(app, ["ask", str(out), QUESTION, "--top", "1", "--max-new-tokens", "1"])
    assert result.exit_code == 0, result.output
    shown = float(re.search(r"│ 1 │ \S+ +│ (-?\d\.\d{3}) ", result.output).group(1))
    expected = vectors @ model.encode_query(QUESTION)
    assert shown == pytest.approx(expected.max(), abs=1.5e-3)


def test_eval_command(saved, tmp_path):
    folder, model = saved
    task = tmp_path / "toy-sts"
    task.mkdir()
    meta = {"name": "toy-sts", "type": "sts", "metric": "spearman", "instruction": "Find similar text."}
    (task / "task.json").write_text(json.dumps(meta | {"source": "test", "license": "test"}))
    scores = [4.5, 0.5, 4.0]
    pairs = [{"s1": a, "s2": b, "score": s} for a, b, s in zip(TEXTS, TEXTS[1:] + TEXTS[:1], scores, strict=True)]
    (task / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    out = tmp_path / "results.json"
    args = ["eval", str(task), "--model", str(folder), "--no-cache", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    config = json.loads(out.read_text())["config"]
    assert config["method"] == model.method
    assert config["steps"] == ([model.steps] if model.method == "gircse" else None)
    assert config["attention"] == model.embed_settings().attention
    assert config["prompt_format"] == model.embed_settings().prompt_format


def test_serve_command(saved, monkeypatch):
    import httpx

    import genembed.serve
    from genembed.serve import running_server

    folder, model = saved
    answers = {}

    def serve_here(app_, **kwargs):  # instead of blocking in uvicorn: serve on a free port, ask, stop
        with running_server(app_) as (url, _):
            answers["info"] = httpx.get(url + "/info").json()
            answers["embeddings"] = httpx.post(url + "/v1/embeddings", json={"input": TEXTS}, timeout=60).json()

    monkeypatch.setattr(genembed.serve, "run_server", serve_here)
    result = runner.invoke(app, ["serve", "--model", str(folder), "--port", "0"])
    assert result.exit_code == 0, result.output
    assert (answers["info"]["method"], answers["info"]["default_steps"]) == (model.method, model.steps)
    vectors = [item["embedding"] for item in answers["embeddings"]["data"]]
    np.testing.assert_allclose(vectors, model.encode(TEXTS), atol=1e-5)


@pytest.mark.parametrize("framework", ["langchain", "llama_index", "haystack"])
def test_integrations(saved, framework):
    folder, model = saved
    if framework == "langchain":
        pytest.importorskip("langchain_core")
        from genembed.integrations.langchain import GenembedEmbeddings

        embedder = GenembedEmbeddings(str(folder))
        documents, query = embedder.embed_documents(TEXTS), embedder.embed_query(QUESTION)
    elif framework == "llama_index":
        pytest.importorskip("llama_index.core")
        from genembed.integrations.llama_index import GenembedEmbedding

        embedder = GenembedEmbedding(str(folder))
        documents = embedder.get_text_embedding_batch(TEXTS)
        query = embedder.get_query_embedding(QUESTION)
    else:
        pytest.importorskip("haystack")
        from haystack import Document

        from genembed.integrations.haystack import GenembedDocumentEmbedder, GenembedTextEmbedder

        text_embedder, document_embedder = GenembedTextEmbedder(str(folder)), GenembedDocumentEmbedder(str(folder))
        text_embedder.warm_up()
        document_embedder.warm_up()
        embedded = document_embedder.run(documents=[Document(content=t) for t in TEXTS])["documents"]
        documents, query = [d.embedding for d in embedded], text_embedder.run(text=QUESTION)["embedding"]
    np.testing.assert_allclose(documents, model.encode_document(TEXTS), atol=1e-5)
    np.testing.assert_allclose(query, model.encode_query(QUESTION), atol=1e-5)
