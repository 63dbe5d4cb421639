"""The old name of :mod:`genembed.retrieval.kv_embed` (the KV-state modules are all ``kv_*`` now).

Kept only for ``scripts/make_golden.py``, which another change is moving; delete this module once that
script imports ``genembed.retrieval.kv_embed``.
"""

from __future__ import annotations

from .kv_embed import EncodedTexts, encode_with_kv

__all__ = ["EncodedTexts", "encode_with_kv"]
