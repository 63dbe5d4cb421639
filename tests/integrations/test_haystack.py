from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # read when haystack is imported; tests stay offline
pytest.importorskip("haystack")

from haystack import Document, Pipeline  # noqa: E402
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever  # noqa: E402
from haystack.components.writers import DocumentWriter  # noqa: E402
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402

from genembed.integrations.haystack import GenembedDocumentEmbedder, GenembedTextEmbedder  # noqa: E402

DOCS = ["the cat sat on the mat", "stock markets fell sharply", "a recipe for tomato soup"]


def test_text_embedder_uses_the_query_side(tiny_model):
    embedder = GenembedTextEmbedder(tiny_model)
    embedder.warm_up()
    out = embedder.run(text="where is the cat?")
    np.testing.assert_allclose(out["embedding"], tiny_model.encode_query("where is the cat?"), atol=1e-6)
    assert out["meta"] == {"model": tiny_model.name}
    np.testing.assert_allclose(asyncio.run(embedder.run_async(text="x"))["embedding"], tiny_model.encode_query("x"))
    with pytest.raises(TypeError, match="GenembedDocumentEmbedder"):
        embedder.run(text=[Document(content="x")])


def test_document_embedder_sets_embeddings_from_the_document_side(tiny_model):
    embedder = GenembedDocumentEmbedder(tiny_model, meta_fields_to_embed=["title"], embedding_separator=": ")
    documents = [Document(content=t, meta={"title": f"T{i}"} if i else {}) for i, t in enumerate(DOCS)]
    out = embedder.run(documents=documents)["documents"]
    assert [d.id for d in out] == [d.id for d in documents] and documents[0].embedding is None  # copies
    texts = [DOCS[0], *(f"T{i}: {t}" for i, t in enumerate(DOCS) if i)]
    np.testing.assert_allclose([d.embedding for d in out], tiny_model.encode_document(texts), atol=1e-6)
    assert embedder.run(documents=[])["documents"] == []
    with pytest.raises(TypeError, match="GenembedTextEmbedder"):
        embedder.run(documents="a string")


def test_indexing_and_query_pipelines_retrieve(tiny_model):
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    indexing = Pipeline()
    indexing.add_component("embedder", GenembedDocumentEmbedder(tiny_model))
    indexing.add_component("writer", DocumentWriter(document_store=store))
    indexing.connect("embedder.documents", "writer.documents")
    indexing.run({"embedder": {"documents": [Document(content=t, id=str(i)) for i, t in enumerate(DOCS)]}})
    querying = Pipeline()
    querying.add_component("embedder", GenembedTextEmbedder(tiny_model))
    querying.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=3))
    querying.connect("embedder.embedding", "retriever.query_embedding")
    hits = querying.run({"embedder": {"text": DOCS[1]}})["retriever"]["documents"]
    scores = tiny_model.similarity(tiny_model.encode_query(DOCS[1]), tiny_model.encode_document(DOCS))[0]
    assert [int(d.id) for d in hits] == scores.argsort(descending=True).tolist()


def test_serialization_round_trip_loads_by_folder(tmp_path, tiny_model):
    folder = tiny_model.save(tmp_path / "saved")
    embedder = GenembedTextEmbedder(str(folder), instruction="Find the topic.", load_kwargs={"device": "cpu"})
    data = embedder.to_dict()
    assert data["init_parameters"]["model"] == str(folder)
    again = GenembedTextEmbedder.from_dict(data)
    again.warm_up()
    expected = tiny_model.encode("q", instruction="Find the topic.")
    np.testing.assert_allclose(again.run(text="q")["embedding"], expected, atol=1e-6)
    with pytest.raises(TypeError, match="by name or folder"):
        GenembedTextEmbedder(tiny_model).to_dict()
    docs = GenembedDocumentEmbedder(str(folder), meta_fields_to_embed=["title"]).to_dict()
    assert GenembedDocumentEmbedder.from_dict(docs).meta_fields_to_embed == ["title"]
    pipeline = Pipeline()
    pipeline.add_component("embedder", GenembedTextEmbedder(str(folder), instruction="Find the topic."))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["genembed.integrations.haystack"])
    np.testing.assert_allclose(loaded.run({"embedder": {"text": "q"}})["embedder"]["embedding"], expected, atol=1e-6)
