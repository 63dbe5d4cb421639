"""Which weights generate: one type and one rule.

A loaded model embeds with its embedding adapter (or the base weights without one). Chat, reranking, RAG
answers and stored KV states run on one of three weights, named by :data:`GenerationWeights`:

- ``"base"``: the base weights, every adapter off (an adapter trained for embeddings only);
- ``"adapter"``: the embedding adapter too (a GRIT jointly trained adapter: the shipped default);
- ``"generation"``: a generation adapter loaded beside the embedding one
  (``genembed.load(generation_adapter=FOLDER)``), alone.

``model.generation_adapter`` holds one of them, ``genembed.load(generation_adapter=)`` and the CLI's
``--generator`` take them (or a folder, which loads a generation adapter), and :func:`choose_weights`
is the one rule that picks them when nobody says. ``True`` and ``False``, the former spellings of
``"adapter"`` and ``"base"``, are still accepted with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

__all__ = ["ADAPTER", "BASE", "GENERATION", "WEIGHTS", "GenerationWeights", "as_weights", "choose_weights"]

GenerationWeights = Literal["base", "adapter", "generation"]
BASE: GenerationWeights = "base"
ADAPTER: GenerationWeights = "adapter"
GENERATION: GenerationWeights = "generation"  # also the peft name of the generation adapter
WEIGHTS: tuple[GenerationWeights, ...] = (BASE, ADAPTER, GENERATION)


def as_weights(value: Any, *, deprecated: bool = True) -> GenerationWeights:
    """``value`` as one of :data:`WEIGHTS`: True / False (the former spellings) become ``"adapter"`` /
    ``"base"``, with a :class:`DeprecationWarning` when ``deprecated`` (a caller's value; a saved file's is
    read silently).

    Raises:
        TypeError: neither a bool nor a string.
        ValueError: a string that is not one of :data:`WEIGHTS`.
    """
    if isinstance(value, bool):
        if deprecated:
            warnings.warn(
                f"generation_adapter={value} is deprecated: use {ADAPTER if value else BASE!r}",
                DeprecationWarning,
                stacklevel=3,
            )
        return ADAPTER if value else BASE
    if not isinstance(value, str):
        raise TypeError(f"generation_adapter must be a bool or one of {WEIGHTS}, got {type(value).__name__}")
    if value not in WEIGHTS:
        raise ValueError(f"generation_adapter must be one of {WEIGHTS}, got {value!r}")
    return value  # type: ignore[return-value]


def choose_weights(
    asked: GenerationWeights | bool | None,
    *,
    saved: GenerationWeights | bool | None = None,
    generator: bool = False,
    joint: bool = False,
) -> GenerationWeights:
    """The weights a loaded model generates with: the one rule (``genembed.load`` applies it once, in
    :func:`genembed.models.assemble.assemble`).

    1. The caller's choice wins (``asked``: ``load(generation_adapter=...)``, the CLI's ``--generator``;
       naming a generation adapter's folder asks for ``"generation"``).
    2. A saved model generates as it was saved (``saved``: its ``genembed.json``).
    3. A generation adapter loaded beside the embedding one generates (``generator``).
    4. An embedding adapter trained with a next-token loss too generates (``joint``: its saved training
       config, :mod:`genembed.models.trained_for`; the shipped default is one).
    5. Otherwise the base weights do: an embedding-only adapter changes what the model says.

    Raises:
        ValueError / TypeError: ``asked`` or ``saved`` is not a choice.
    """
    if asked is not None:
        return as_weights(asked)
    if saved is not None:
        return as_weights(saved, deprecated=False)
    if generator:
        return GENERATION
    return ADAPTER if joint else BASE
