"""The steps after the embedding core, in one place: raw embedding -> centre -> truncate -> normalise -> quantise.

sentence-transformers makes these steps modules of its pipeline (``Normalize`` after ``Pooling``, listed
in ``modules.json``) and ``encode`` applies ``truncate_dim``, normalisation and ``precision`` after
them, in that order. genembed does the same with one :class:`OutputPipeline`, built once from the
model's settings and the caller's choices, and used by every path that turns raw embeddings into the
vectors a user sees: ``model.encode``, the server (:mod:`genembed.serve.state`), corpus shards
(:mod:`genembed.encoders.corpus`), index builds and queries (:mod:`genembed.retrieval.kv_embed`) and
evaluation (:mod:`genembed.eval.encoding`, which centres after its cache of raw embeddings).

The steps:

1. **centre** (``center``): ``normalize(z) - c`` with ``c`` the instruction's center
   (:mod:`genembed.encoders.centering`);
2. **truncate** (``truncate_dim``): keep the first ``truncate_dim`` dimensions (Matryoshka);
3. **normalise** (``normalize``): L2 over the last axis, after truncation;
4. **quantise** (``precision``): :func:`genembed.encoders.quantize.quantize_embeddings`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .quantize import check_precision, quantize_embeddings
from .settings import EmbedSettings, check_truncate_dim

__all__ = ["RAW_NORMALISED", "OutputPipeline"]


@dataclass(frozen=True)
class OutputPipeline:
    """What happens to raw embeddings before a caller sees them (see the module docstring).

    Raises:
        ValueError: ``center`` or ``normalize`` not a bool, a bad ``truncate_dim`` or ``precision``.
    """

    center: bool = False  # subtract the instruction's center (genembed.encoders.centering)
    truncate_dim: int | None = None  # keep the first truncate_dim dimensions (None: all)
    normalize: bool = True  # L2-normalise (after truncation)
    precision: str = "float32"  # float32, int8, uint8, binary or ubinary (genembed.encoders.quantize)

    def __post_init__(self) -> None:
        for name in ("center", "normalize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        check_truncate_dim(self.truncate_dim)
        check_precision(self.precision)

    @classmethod
    def of(cls, model: Any, **changes: Any) -> OutputPipeline:
        """The pipeline of a loaded model (its ``center`` and ``truncate_dim``), with ``changes`` made
        (None keeps the model's)."""
        own = cls(center=bool(getattr(model, "center", False)), truncate_dim=getattr(model, "truncate_dim", None))
        return own.replace(**changes)

    @classmethod
    def of_index(cls, settings: EmbedSettings) -> OutputPipeline:
        """The pipeline of an index (its manifest's ``center`` and ``truncate_dim``; normalised)."""
        return cls(center=settings.center, truncate_dim=settings.truncate_dim)

    def replace(self, **changes: Any) -> OutputPipeline:
        """A copy with the ``changes`` that are not None (checked again)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def dim(self, full: int) -> int:
        """The length of the vectors out of a core of ``full`` dimensions."""
        return min(full, self.truncate_dim) if self.truncate_dim else full

    def shift(self, backbone: Any, settings: Any, instruction: str, *, all_steps: bool = False) -> torch.Tensor | None:
        """The center to subtract for ``instruction`` (looked up or computed), or None without centring."""
        if not self.center:
            return None
        from .centering import instruction_center  # centering encodes: imported when a center is needed

        return instruction_center(backbone, settings, instruction, all_steps=all_steps)

    def apply(self, embeddings: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
        """Centre (by ``shift``, when given), truncate, normalise and quantise raw embeddings ``(..., D)``.

        Returns float32 embeddings, or for another precision the quantised values as a tensor."""
        embeddings = embeddings.float()
        if shift is not None and embeddings.numel():
            embeddings = torch.nn.functional.normalize(embeddings, dim=-1) - shift.float()
        if self.truncate_dim is not None:
            embeddings = embeddings[..., : self.truncate_dim]
        if self.normalize and embeddings.numel():
            embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
        if self.precision != "float32":
            embeddings = torch.from_numpy(quantize_embeddings(embeddings, self.precision))
        return embeddings

    def __call__(
        self,
        backbone: Any,
        embeddings: torch.Tensor,
        settings: EmbedSettings,
        instruction: str,
        *,
        all_steps: bool = False,
    ) -> torch.Tensor:
        """:meth:`apply` with the instruction's center when centring (``settings``: the
        :class:`~genembed.encoders.settings.EmbedSettings` the raw embeddings were made with)."""
        return self.apply(embeddings, self.shift(backbone, settings, instruction, all_steps=all_steps))


# raw embeddings L2-normalised and nothing else: what a center is the mean of
RAW_NORMALISED = OutputPipeline()
