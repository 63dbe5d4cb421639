"""Which weights, attention and prompt produced an index's stored KV states, and whether a model may
generate from them.

``index build --store-kv`` records, in the manifest's ``kv.source``::

    {"backbone": "SmolLM2-135M-Instruct", "adapter": "none" | "<name>@sha256:<first 16 hex digits>",
     "attention": "causal", "prompt": {...the RAG prompt's fields...}, "pass": "embedding" | "generation"}

``backbone`` and ``adapter`` are the *generation* weights (the adapter only when the model generates
with it; the shipped GIRCSE adapter does not, so its indexes record ``"none"``). ``pass`` says whether
the states were taken from the embedding pass (it was the generator's own pass) or computed in a second
pass. ``ask`` and ``index add`` compare this with the loaded model (:func:`check_kv_source`) and refuse
a mismatch: states from other weights, another attention or another prompt give wrong or empty answers
without any error.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from .._files import sha256_file
from ..generation.adapters import generating_adapter
from ..generation.rag_prompt import RagPrompt
from ..models.adapters import current_name

__all__ = ["KVSourceError", "check_kv_source", "generation_weights", "kv_source"]


class KVSourceError(ValueError):
    """Stored KV states were made by other weights, attention or prompt than the loaded model would use."""


@functools.cache
def _adapter_digest(path: str) -> str:
    weights = Path(path) / "adapter_model.safetensors"
    return sha256_file(weights)[:16] if weights.is_file() else "unhashed"


def generation_weights(model: Any) -> dict[str, str]:
    """``{"backbone": ..., "adapter": ...}``: the weights ``model`` generates with.

    The adapter is ``"none"`` when the model generates on the base weights (no adapter, or an
    embedding-only one); otherwise the name of the adapter it generates with (the embedding adapter of a
    jointly trained model, or a generation adapter loaded beside it) and the first 16 hex digits of its
    weights' SHA-256.
    """
    weights = generating_adapter(model)
    if weights is None:
        return {"backbone": model.backbone.name, "adapter": "none"}
    if weights == "default":
        name, path = model.adapter, getattr(model, "adapter_path", None)
    else:
        name, path = model.generation_adapter_name, getattr(model, "generation_adapter_path", None)
    return {"backbone": model.backbone.name, "adapter": f"{name}@sha256:{_adapter_digest(path)}" if path else name}


def kv_source(model: Any, prompt: RagPrompt, *, reused: bool) -> dict[str, Any]:
    """The ``kv.source`` manifest record for states made by ``model`` for ``prompt``."""
    return {
        **generation_weights(model),
        "attention": "causal",
        "prompt": prompt.to_dict(),
        "pass": "embedding" if reused else "generation",
    }


def _describe(source: dict[str, Any]) -> str:
    adapter = source.get("adapter", "?")
    weights = f"{source.get('backbone', '?')}" + ("" if adapter == "none" else f" + adapter {adapter}")
    return f"{weights}, {source.get('attention', '?')} attention"


def check_kv_source(stored: dict[str, Any] | None, model: Any, prompt: RagPrompt, *, index: str | Path) -> None:
    """Raise :class:`KVSourceError` unless ``model`` generates with the weights, attention and ``prompt``
    that made the stored states (``stored``: the manifest's ``kv.source``; None for an index written
    before it was recorded).
    """
    fix = (
        f"Rebuild it with `genembed index build ... --out {index} --store-kv --overwrite` with the model you "
        "generate with, or answer with --kv-cache none or query (which need no stored states)."
    )
    if stored is None:
        raise KVSourceError(
            f"index {index} stores KV states without a record of the weights and attention that made them (an "
            f"older index, possibly from a bidirectional embedding pass, which gives empty answers). {fix}"
        )
    wanted = kv_source(model, prompt, reused=False)
    if stored.get("backbone") != wanted["backbone"] or current_name(str(stored.get("adapter"))) != wanted["adapter"]:
        raise KVSourceError(
            f"index {index} stores KV states of {_describe(stored)}, but the loaded model generates with "
            f"{_describe(wanted)}. {fix}"
        )
    if stored.get("attention") != "causal":
        raise KVSourceError(f"index {index} stores KV states of {_describe(stored)}; generation is causal. {fix}")
    if stored.get("prompt") != wanted["prompt"]:
        raise KVSourceError(
            f"index {index} stores KV states for another RAG prompt ({stored.get('prompt')}) than the one in use "
            f"({wanted['prompt']}). {fix}"
        )
