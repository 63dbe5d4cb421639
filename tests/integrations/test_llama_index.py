from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402

from genembed.integrations.llama_index import GenembedEmbedding  # noqa: E402

DOCS = ["the cat sat on the mat", "stock markets fell sharply", "a recipe for tomato soup", "dogs bark at night"]


def test_queries_and_texts_use_their_sides(tiny_model):
    embedding = GenembedEmbedding(tiny_model, embed_batch_size=3)
    assert isinstance(embedding, BaseEmbedding) and embedding.model is tiny_model
    assert embedding.model_name == tiny_model.name and embedding.class_name() == "GenembedEmbedding"
    np.testing.assert_allclose(embedding.get_query_embedding("where?"), tiny_model.encode_query("where?"), atol=1e-6)
    np.testing.assert_allclose(embedding.get_text_embedding(DOCS[0]), tiny_model.encode_document(DOCS[0]), atol=1e-6)
    # the public batch method splits into embed_batch_size batches and calls _get_text_embeddings
    np.testing.assert_allclose(embedding.get_text_embedding_batch(DOCS), tiny_model.encode_document(DOCS), atol=1e-6)


def test_async_methods_match_the_sync_ones(tiny_model):
    embedding = GenembedEmbedding(tiny_model)

    async def run():
        return await asyncio.gather(
            embedding.aget_query_embedding("where?"),
            embedding.aget_text_embedding(DOCS[0]),
            embedding.aget_text_embedding_batch(DOCS),
        )

    query, text, batch = asyncio.run(run())
    np.testing.assert_allclose(query, tiny_model.encode_query("where?"), atol=1e-6)
    np.testing.assert_allclose(text, tiny_model.encode_document(DOCS[0]), atol=1e-6)
    np.testing.assert_allclose(batch, tiny_model.encode_document(DOCS), atol=1e-6)


def test_a_llama_index_retriever_ranks_with_it(tiny_model):
    index = VectorStoreIndex(
        [TextNode(text=t, id_=str(i)) for i, t in enumerate(DOCS)], embed_model=GenembedEmbedding(tiny_model)
    )
    hits = index.as_retriever(similarity_top_k=4).retrieve(DOCS[2])
    scores = tiny_model.similarity(tiny_model.encode_query(DOCS[2]), tiny_model.encode_document(DOCS))[0]
    assert [int(hit.node.node_id) for hit in hits] == scores.argsort(descending=True).tolist()
    np.testing.assert_allclose([hit.score for hit in hits], scores.sort(descending=True).values.numpy(), atol=1e-5)
