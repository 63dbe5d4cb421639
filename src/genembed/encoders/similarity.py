"""Similarity between embeddings, named as sentence-transformers names them.

``cosine`` and ``dot`` are the usual scores; ``euclidean`` and ``manhattan`` are *negative* distances,
so that for every function a higher score means more similar. :func:`similarity` gives the
``(n, m)`` matrix of every pair, :func:`similarity_pairwise` the ``(n,)`` scores of ``a[i]`` with
``b[i]``. Both return float32 torch tensors, as ``SentenceTransformer.similarity`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["SIMILARITY_FUNCTIONS", "check_similarity_fn", "similarity", "similarity_pairwise"]

SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
_ALIASES = {"dot_product": "dot", "cos_sim": "cosine"}


def check_similarity_fn(name: str) -> str:
    """The canonical name of a similarity function; ValueError naming the choices otherwise."""
    name = _ALIASES.get(str(name), str(name))
    if name not in SIMILARITY_FUNCTIONS:
        raise ValueError(f"similarity_fn_name must be one of {SIMILARITY_FUNCTIONS}, got {name!r}")
    return name


def similarity(a: Any, b: Any, similarity_fn_name: str = "cosine") -> torch.Tensor:
    """``(n, m)`` scores between every row of ``a`` and every row of ``b`` (one vector counts as one row)."""
    name = check_similarity_fn(similarity_fn_name)
    a_t, b_t = _rows(a), _rows(b)
    if name == "cosine":
        return _unit(a_t) @ _unit(b_t).T
    if name == "dot":
        return a_t @ b_t.T
    return -torch.cdist(a_t, b_t, p=2.0 if name == "euclidean" else 1.0)


def similarity_pairwise(a: Any, b: Any, similarity_fn_name: str = "cosine") -> torch.Tensor:
    """``(n,)`` scores of ``a[i]`` with ``b[i]``; ``a`` and ``b`` hold the same number of rows."""
    name = check_similarity_fn(similarity_fn_name)
    a_t, b_t = _rows(a), _rows(b)
    if a_t.shape != b_t.shape:
        raise ValueError(
            f"similarity_pairwise needs a and b of the same shape, got {tuple(a_t.shape)} and {tuple(b_t.shape)}"
        )
    if name == "cosine":
        return (_unit(a_t) * _unit(b_t)).sum(dim=-1)
    if name == "dot":
        return (a_t * b_t).sum(dim=-1)
    return -torch.linalg.vector_norm(a_t - b_t, ord=2 if name == "euclidean" else 1, dim=-1)


def _rows(x: Any) -> torch.Tensor:
    tensor = x.detach() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    tensor = tensor.float()
    return tensor.unsqueeze(0) if tensor.dim() == 1 else tensor


def _unit(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x, p=2, dim=-1)
