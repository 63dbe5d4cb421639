"""genembed inside RAG frameworks, each an optional extra (``pip install 'genembed[langchain]'`` ...):

- :mod:`genembed.integrations.langchain`: ``GenembedEmbeddings``, a LangChain ``Embeddings``;
- :mod:`genembed.integrations.llama_index`: ``GenembedEmbedding``, a LlamaIndex ``BaseEmbedding``;
- :mod:`genembed.integrations.haystack`: ``GenembedTextEmbedder`` and ``GenembedDocumentEmbedder``,
  Haystack components.

Each embeds queries with the model's query instruction (``model.prompts["query"]``) and documents with
its document side (``model.prompts["document"]``), as ``encode_query`` / ``encode_document`` do.
Importing this package imports no framework; import the submodule you use. Examples: docs/integrations.md.
"""

from __future__ import annotations

__all__: list[str] = []
