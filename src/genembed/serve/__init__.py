"""HTTP serving: one model for embeddings (OpenAI), chat (OpenAI) and reranking (Cohere/Jina).

Needs the ``serve`` extra (``pip install genembed[serve]``); run it with ``genembed serve``.
"""

from __future__ import annotations

from .app import create_app
from .server import run_server, running_server
from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "run_server", "running_server"]
