from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from genembed.integrations.langchain import GenembedEmbeddings  # noqa: E402

DOCS = ["the cat sat on the mat", "stock markets fell sharply", "a recipe for tomato soup"]


def test_queries_and_documents_use_their_sides(tiny_model):
    embeddings = GenembedEmbeddings(tiny_model)
    assert isinstance(embeddings, Embeddings) and embeddings.model is tiny_model
    query = embeddings.embed_query("where is the cat?")
    documents = embeddings.embed_documents(DOCS)
    assert isinstance(query, list) and all(isinstance(x, float) for x in query)
    np.testing.assert_allclose(query, tiny_model.encode_query("where is the cat?"), atol=1e-6)
    np.testing.assert_allclose(documents, tiny_model.encode_document(DOCS), atol=1e-6)
    assert not np.allclose(query, embeddings.embed_documents(["where is the cat?"])[0], atol=1e-4)
    assert embeddings.embed_documents([]) == []


def test_async_methods_match_the_sync_ones(tiny_model):
    embeddings = GenembedEmbeddings(tiny_model)

    async def both():
        return await asyncio.gather(embeddings.aembed_query("a query"), embeddings.aembed_documents(DOCS))

    query, documents = asyncio.run(both())
    np.testing.assert_allclose(query, embeddings.embed_query("a query"), atol=1e-6)
    np.testing.assert_allclose(documents, embeddings.embed_documents(DOCS), atol=1e-6)


def test_instructions_and_encode_settings(tiny_model):
    embeddings = GenembedEmbeddings(
        tiny_model, query_instruction="Find the topic.", document_instruction="", encode_kwargs={"steps": 2}
    )
    np.testing.assert_allclose(
        embeddings.embed_query("q"), tiny_model.encode("q", instruction="Find the topic.", steps=2), atol=1e-6
    )
    np.testing.assert_allclose(embeddings.embed_documents(["d"])[0], tiny_model.encode("d", steps=2), atol=1e-6)


def test_a_langchain_vector_store_searches_with_it(tiny_model):
    embeddings = GenembedEmbeddings(tiny_model)
    store = InMemoryVectorStore.from_texts(DOCS, embeddings, metadatas=[{"i": i} for i in range(3)])
    hits = store.similarity_search_with_score(DOCS[1], k=3)
    assert all(isinstance(doc, Document) for doc, _ in hits)
    scores = tiny_model.similarity(tiny_model.encode_query(DOCS[1]), tiny_model.encode_document(DOCS))[0]
    assert [doc.metadata["i"] for doc, _ in hits] == scores.argsort(descending=True).tolist()
    np.testing.assert_allclose([s for _, s in hits], scores.sort(descending=True).values.numpy(), atol=1e-5)


def test_a_model_given_by_folder_is_loaded(tmp_path, tiny_model):
    folder = tiny_model.save(tmp_path / "saved")
    embeddings = GenembedEmbeddings(folder, load_kwargs={"device": "cpu"})
    np.testing.assert_allclose(embeddings.embed_query("q"), tiny_model.encode_query("q"), atol=1e-6)
