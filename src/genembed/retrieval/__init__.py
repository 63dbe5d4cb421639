"""Retrieval and RAG: chunk sources, build an index (with optional KV states) in any vector store (a
faiss folder or a Milvus collection, behind one protocol: :mod:`~genembed.retrieval.store`), search
it, and answer questions with the retrieved passages in context, reusing KV states from the
embedding passes.

Names load lazily, so importing this package does not import faiss or safetensors.
"""

from __future__ import annotations

from .._lazy import lazy_names

_LAZY = {
    "Chunk": "chunking",
    "Document": "chunking",
    "SourceError": "chunking",
    "chunk_documents": "chunking",
    "read_sources": "chunking",
    "encode_with_kv": "kv_embed",
    "FaissStore": "faiss_store",
    "ChunkRecord": "store",
    "build_index": "index_build",
    "add_to_index": "index_build",
    "IndexLoadError": "errors",
    "IndexCorruptedError": "errors",
    "IndexVersionError": "errors",
    "IndexIncompleteError": "errors",
    "StoreConnectionError": "errors",
    "MilvusStore": "milvus_store",
    "StoreLocation": "store",
    "VectorStore": "store",
    "STORES": "stores",
    "open_index": "stores",
    "parse_location": "stores",
    "import_encoded": "encoded_import",
    "KVStore": "kv_store",
    "KVGeometry": "kv_store",
    "kv_bytes_per_token": "kv_store",
    "ask": "rag",
    "retrieve": "rag",
    "Answer": "rag",
    "Source": "rag",
    "MODES": "context",
    "ExactIndex": "search",
    "SearchHit": "search",
    "SearchIndex": "search",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
