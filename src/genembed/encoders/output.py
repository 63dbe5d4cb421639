"""The steps after the embedding core, in one place: raw embedding -> centre -> truncate -> normalise -> quantise.

sentence-transformers makes these steps modules of its pipeline (``Normalize`` after ``Pooling``, listed
in ``modules.json``) and ``encode`` applies ``truncate_dim``, normalisation and ``precision`` after
them, in that order. genembed does the same with one :class:`OutputPipeline`, built once from the
model's settings and the caller's choices, and used by every path that turns raw embeddings into the
vectors a user sees: ``model.encode`` (:func:`apply_output`, after the core: the call's
:class:`~genembed.encoders.settings.OutputSettings` were checked when its settings were built), the
server (:mod:`genembed.serve.state`), corpus shards (:mod:`genembed.encoders.corpus`), index builds and
queries (:mod:`genembed.retrieval.kv_embed`) and evaluation (:mod:`genembed.eval.encoding`, which
centres after its cache of raw embeddings).

The steps:

1. **centre** (``center``): ``normalize(z) - c`` with ``c`` the instruction's center
   (:mod:`genembed.encoders.centering`);
2. **truncate** (``truncate_dim``): keep the first ``truncate_dim`` dimensions (Matryoshka);
3. **normalise** (``normalize``): L2 over the last axis, after truncation;
4. **quantise** (``precision``): :func:`genembed.encoders.quantize.quantize_embeddings`.
"""

from __future__ import annotations

from typing import Any

import torch

from .quantize import quantize_embeddings
from .settings import EmbedSettings, IndexEmbedSettings, OutputSettings

__all__ = ["RAW_NORMALISED", "OutputPipeline", "apply_output"]


def shift(
    output: OutputSettings, backbone: Any, settings: Any, instruction: str, *, all_steps: bool = False
) -> torch.Tensor | None:
    """The center to subtract for ``instruction`` (looked up or computed), or None without centring."""
    if not output.center:
        return None
    from .centering import instruction_center  # centering encodes: imported when a center is needed

    return instruction_center(backbone, settings, instruction, all_steps=all_steps)


def apply(output: OutputSettings, embeddings: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
    """Centre (by ``shift``, when given), truncate, normalise and quantise raw embeddings ``(..., D)``.

    Returns float32 embeddings, or for another precision the quantised values as a tensor."""
    embeddings = embeddings.float()
    if shift is not None and embeddings.numel():
        embeddings = torch.nn.functional.normalize(embeddings, dim=-1) - shift.float()
    if output.truncate_dim is not None:
        embeddings = embeddings[..., : output.truncate_dim]
    if output.normalize and embeddings.numel():
        embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
    if output.precision != "float32":
        embeddings = torch.from_numpy(quantize_embeddings(embeddings, output.precision))
    return embeddings


def apply_output(
    output: OutputSettings,
    backbone: Any,
    embeddings: torch.Tensor,
    settings: EmbedSettings,
    instruction: str,
    *,
    all_steps: bool = False,
) -> torch.Tensor:
    """The pipeline ``output`` asks for (already checked, e.g. a call's
    :attr:`~genembed.encoders.settings.CallSettings.output`), applied to raw ``embeddings`` made with
    ``settings`` (an :class:`~genembed.encoders.settings.EmbedSettings`) and ``instruction``: centre (the
    instruction's center, when centring), truncate, normalise, quantise."""
    return apply(output, embeddings, shift(output, backbone, settings, instruction, all_steps=all_steps))


class OutputPipeline(OutputSettings):
    """What happens to raw embeddings before a caller sees them (see the module docstring): the
    :class:`~genembed.encoders.settings.OutputSettings` (checked when made) and the steps that apply them
    (``pipeline.apply(embeddings, shift)``, ``pipeline(backbone, embeddings, settings, instruction)``).

    Raises:
        ValueError: ``center`` or ``normalize`` not a bool, a bad ``truncate_dim`` or ``precision``.
    """

    shift = shift
    apply = apply
    __call__ = apply_output

    @classmethod
    def of(cls, model: Any, **changes: Any) -> OutputPipeline:
        """The pipeline of a loaded model (its ``center`` and ``truncate_dim``), with ``changes`` made
        (None keeps the model's)."""
        own = cls(center=bool(getattr(model, "center", False)), truncate_dim=getattr(model, "truncate_dim", None))
        return own.replace(**changes)

    @classmethod
    def of_index(cls, settings: IndexEmbedSettings | EmbedSettings) -> OutputPipeline:
        """The pipeline of an index (its manifest's ``center`` and ``truncate_dim``; normalised)."""
        index = IndexEmbedSettings.of(settings)
        return cls(center=index.center, truncate_dim=index.truncate_dim)

    def dim(self, full: int) -> int:
        """The length of the vectors out of a core of ``full`` dimensions."""
        return min(full, self.truncate_dim) if self.truncate_dim else full


# raw embeddings L2-normalised and nothing else: what a center is the mean of
RAW_NORMALISED = OutputPipeline()
