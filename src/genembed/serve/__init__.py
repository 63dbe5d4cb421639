"""HTTP serving: one model for embeddings (OpenAI), chat (OpenAI) and reranking (Cohere/Jina).

Needs the ``serve`` extra (``pip install genembed[serve]``); run it with ``genembed serve``. Importing
the package does no work: each name loads its module (fastapi, the model code) on first use.
"""

from __future__ import annotations

from .._lazy import lazy_names

__all__ = ["ServeSettings", "create_app", "run_server", "running_server"]

__getattr__, __dir__ = lazy_names(
    __name__,
    {"ServeSettings": "settings", "create_app": "app", "run_server": "server", "running_server": "server"},
)
