"""What a LoRA adapter was trained for, read from the training config saved beside it.

``genembed train`` writes the resolved run config next to the adapter (``genembed_train.yaml``; the
shipped adapter carries it as ``training_config.yaml``). Its ``embedding`` section names the one
embedding method and attention the contrastive loss trained, and its ``generative`` section says
whether a next-token loss kept the adapter fit for generation (GRIT joint training). An adapter used
for anything else is untrained for it: :meth:`GenerativeEmbedder.encode` warns
(:class:`UntrainedAdapterWarning`), since research use of such pairs is legitimate; KV reuse, whose
failure is silent (empty or wrong answers), is refused instead (:mod:`genembed.retrieval.kv_source`).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..encoders.methods import DEFAULT_METHOD, METHOD_RULES

__all__ = [
    "CONFIG_NAMES",
    "TRAIN_CONFIG",
    "TrainedFor",
    "UntrainedAdapterWarning",
    "read_trained_for",
    "read_training_config",
    "warn_if_untrained",
]

# the resolved run config ``genembed train`` writes beside its adapter (the one declaration of the name),
# and the name the shipped adapter carries it under
TRAIN_CONFIG = "genembed_train.yaml"
CONFIG_NAMES = (TRAIN_CONFIG, "training_config.yaml")


class UntrainedAdapterWarning(UserWarning):
    """An adapter is used with an embedding method or attention it was not trained for."""


@dataclass(frozen=True)
class TrainedFor:
    """The embedding method and attention an adapter was trained with, and whether for generation too."""

    method: str  # a name in genembed.encoders.methods.METHODS
    attention: str  # causal | bidirectional (fixed for some methods: grit is always bidirectional)
    generation: bool  # trained with a next-token loss of positive weight (GRIT joint training)
    config: str  # the saved config this was read from

    def encode_problem(self, method: str, attention: str) -> str | None:
        """Why ``method``/``attention`` are untrained for this adapter, or None when they are what it learned."""
        if (method, attention) == (self.method, self.attention):
            return None
        return (
            f"this adapter was trained for method={self.method!r} with {self.attention} attention only (its "
            f"{Path(self.config).name}); method={method!r} with {attention} attention is untrained and may give "
            f"poor embeddings (e.g. a paraphrase scoring below an unrelated sentence). Use method={self.method!r}, "
            "the raw backbone (genembed.load(adapter=False), CLI --adapter none), or an adapter trained for "
            f"{method!r}"
        )


def read_training_config(adapter_path: str | os.PathLike) -> tuple[Path, dict] | None:
    """``(file, config)``: the training config saved beside the adapter in ``adapter_path``, or None.

    Raises:
        DamagedFileError: the file is not readable YAML.
        ValueError: the saved config is not a YAML mapping (the message names the file).
    """
    import yaml

    path = next((Path(adapter_path) / n for n in CONFIG_NAMES if (Path(adapter_path) / n).is_file()), None)
    if path is None:
        return None
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        from .._files import DamagedFileError

        raise DamagedFileError(
            f"{path} is not readable YAML ({exc}): the file is damaged. Copy the adapter folder again."
        ) from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a YAML mapping (a genembed training config)")
    return path, config


def read_trained_for(adapter_path: str | os.PathLike) -> TrainedFor | None:
    """The :class:`TrainedFor` of the adapter in ``adapter_path``; None when no training config was saved.

    Raises:
        ValueError: the saved config is not a YAML mapping (the message names the file).
    """
    found = read_training_config(adapter_path)
    if found is None:
        return None
    path, config = found
    embedding = config.get("embedding") or {}
    generative = config.get("generative") or {}
    method = str(embedding.get("method", DEFAULT_METHOD))
    attention = str(embedding.get("attention", "causal"))
    if method in METHOD_RULES:  # an unknown method fails when used, with the list of methods
        attention = METHOD_RULES[method].attention(attention)
    generation = bool(generative.get("files")) and float(generative.get("weight", 1.0)) > 0
    return TrainedFor(method, attention, generation, str(path))


def warn_if_untrained(
    trained_for: TrainedFor | None, adapter: str | None, method: str, attention: str, *, stacklevel: int = 3
) -> None:
    """Warn (:class:`UntrainedAdapterWarning`) when ``adapter`` was not trained for ``method``/``attention``
    (``stacklevel``: :func:`warnings.warn`'s, from this function; 3, its caller's caller)."""
    problem = trained_for.encode_problem(method, attention) if trained_for is not None else None
    if problem:
        warnings.warn(f"adapter {adapter}: {problem}", UntrainedAdapterWarning, stacklevel=stacklevel)
