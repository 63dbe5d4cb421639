"""The loss registry: each training loss by name, with its class and the ``loss:`` config keys it reads.

The objective is one contrastive loss plus any number of weighted terms on the same embeddings:

    loss = contrastive (loss.name; default the method's: icr for gircse, info_nce otherwise)
         + sum over the terms whose weight key is > 0 of  weight * term

The ``loss:`` section of the run config is built from this table (:func:`loss_options`), so a loss's
keys, defaults and checks live in its own module; the run set-up (``training/setup.py``) builds what the
config names (:func:`build_losses`) and never branches on a loss's name. Adding a loss is one module (the
class, its ``OPTIONS`` and ``from_config``) plus one line in :data:`LOSSES`; see docs/training.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .distill import SimilarityDistillation
from .embedding_distill import EmbeddingDistillation
from .icr import ICRLoss
from .info_nce import ContrastiveTerms, InfoNCE
from .options import Option

__all__ = [
    "LOSSES",
    "ContrastiveLoss",
    "LossContext",
    "LossEntry",
    "ObjectiveTerm",
    "TrainedTerm",
    "active_terms",
    "build_losses",
    "contrastive_names",
    "loss_options",
    "teacher_needs",
    "term_labels",
    "term_names",
]


class ContrastiveLoss(Protocol):
    """The objective's main loss, on query and document embeddings ``(B, K, D)`` and ``(N, K, D)``."""

    def terms(
        self, queries: torch.Tensor, documents: torch.Tensor, labels: torch.Tensor | None, mask: torch.Tensor | None
    ) -> ContrastiveTerms:
        """The loss and what is logged of it (each step's loss, the regulariser)."""
        ...

    def trained_steps(self, steps: int) -> list[int]:
        """The steps z_k this loss trains (the weighted terms are averaged over the same steps)."""
        ...


class ObjectiveTerm(Protocol):
    """A weighted term added to the contrastive loss, computed at each trained step z_k and averaged.

    ``teacher`` holds the batch's teacher inputs (see :meth:`genembed.training.objective.Objective.forward`);
    a term that needs one it lacks raises ``ValueError``.
    """

    weight: float

    def on_pairs(
        self, queries: torch.Tensor, documents: torch.Tensor, mask: torch.Tensor | None, teacher: Mapping[str, Any]
    ) -> torch.Tensor:
        """The term on one step's query and document embeddings ``(B, D)``, ``(N, D)`` (a scalar)."""
        ...

    def on_texts(self, texts: torch.Tensor, teacher_texts: torch.Tensor) -> torch.Tensor:
        """The term on one step's single-text embeddings ``(B, D)`` with the teacher's vectors ``(B, T)``."""
        ...


class TrainedTerm(ObjectiveTerm, Protocol):
    """A term with weights of its own (an ``nn.Module`` with parameters), trained with the model. Its
    weights are checkpointed with the run and saved beside the trained model, and a later stage continues
    them (:mod:`genembed.training.teacher_map`: the one trained term so far, the teacher map)."""

    lr: float  # its learning rate

    def parameters(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class LossContext:
    """What a loss may need besides its config keys to be built."""

    hidden_size: int  # the student's embedding width
    teacher_dimension: int | None = None  # the cached teacher vectors' width (loss.distill_targets), if any


@dataclass(frozen=True)
class LossEntry:
    """One registered loss.

    ``cls.from_config(loss_config, context)`` builds it; ``cls.OPTIONS`` are its ``loss.`` keys; a term
    (not a contrastive loss) is on when its ``weight`` key is > 0.
    """

    cls: Any
    weight: str | None = None  # None: a contrastive loss, chosen by loss.name

    @property
    def teacher(self) -> str | None:
        """What the term needs of the teacher with each batch: ``"scores"`` (its similarities over the
        batch: the teacher runs, or its cached vectors give them), ``"vectors"`` (its cached vectors of the
        batch's texts, ``loss.distill_targets``) or None (the class's ``TEACHER``)."""
        return getattr(self.cls, "TEACHER", None)

    @property
    def options(self) -> tuple[Option, ...]:
        return getattr(self.cls, "OPTIONS", ())


LOSSES: dict[str, LossEntry] = {
    "icr": LossEntry(ICRLoss),
    "info_nce": LossEntry(InfoNCE),
    "distill": LossEntry(SimilarityDistillation, weight="distill_weight"),
    "regress": LossEntry(EmbeddingDistillation, weight="regress_weight"),
}

# keys every objective reads (the teacher keys serve every teacher term and single texts)
SHARED_OPTIONS = (
    Option("name", str | None, None, "the contrastive loss; None = the method's (icr for gircse, else info_nce)"),
    Option("temperature", float, 0.02, "InfoNCE temperature on cosine similarities", check="positive"),
    Option("cross_device_negatives", bool, True, "multi-process: score queries against every process's documents"),
    Option("distill_teacher", str, "all-MiniLM-L6-v2", "the teacher (see training/teachers.py) or a folder"),
    Option("distill_targets", str | None, None, "a root of cached teacher targets (genembed teacher-targets)"),
    Option(
        "distill_max_length", int | None, None, "tokens the teacher reads per target text; None = its own", "positive"
    ),
)


def contrastive_names() -> list[str]:
    """The names ``loss.name`` accepts."""
    return [name for name, entry in LOSSES.items() if entry.weight is None]


def term_names() -> list[str]:
    """The weighted terms, in the order they are added (and logged)."""
    return [name for name, entry in LOSSES.items() if entry.weight is not None]


def term_labels() -> dict[str, str]:
    """Each term's name in the metrics plot (the class's ``LABEL``, else its registry name)."""
    return {name: getattr(LOSSES[name].cls, "LABEL", name) for name in term_names()}


def active_terms(config: Any) -> list[str]:
    """The terms a ``loss:`` section turns on (weight > 0), in registry order."""
    return [name for name in term_names() if getattr(config, LOSSES[name].weight) > 0]


def teacher_needs(config: Any) -> frozenset[str]:
    """What the terms a ``loss:`` section turns on need of the teacher each batch (see
    :attr:`LossEntry.teacher`); empty when no term asks the teacher."""
    return frozenset(LOSSES[name].teacher for name in active_terms(config) if LOSSES[name].teacher)


def loss_options() -> list[Option]:
    """Every ``loss.`` key: the shared ones, then each loss's in registry order."""
    options = list(SHARED_OPTIONS)
    for entry in LOSSES.values():
        options += entry.options
    names = [option.name for option in options]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise RuntimeError(f"loss keys declared twice in the loss registry: {twice}")
    return options


def build_losses(
    config: Any, method_loss: str, context: LossContext
) -> tuple[ContrastiveLoss, dict[str, ObjectiveTerm]]:
    """The contrastive loss and the weighted terms a ``loss:`` section turns on.

    Args:
        config: the run's ``loss:`` section.
        method_loss: the embedding method's contrastive loss (used when ``loss.name`` is None).
        context: what the losses need besides their keys.

    Raises:
        ValueError: the name is not a registered contrastive loss.
    """
    name = config.name or method_loss
    if name not in contrastive_names():
        raise ValueError(f"loss.name must be one of {contrastive_names()}, got {name!r}")
    contrastive = LOSSES[name].cls.from_config(config, context)
    terms = {term: LOSSES[term].cls.from_config(config, context) for term in active_terms(config)}
    return contrastive, terms
