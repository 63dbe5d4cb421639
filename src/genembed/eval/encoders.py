"""Encoders the harness can evaluate: genembed models and sentence-transformers models."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

from ..encoders.defaults import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH
from ..encoders.methods import DEFAULT_METHOD, DEFAULT_STEPS, SOFT_TOKEN_METHOD, method_rules
from ..encoders.output import OutputPipeline
from ..encoders.settings import EmbedSettings
from ._fingerprint import code_fingerprint, digest, folder_fingerprint, tensors_fingerprint

__all__ = ["GenembedEncoder", "SentenceTransformerEncoder", "parse_steps"]


def parse_steps(steps: int | str | Sequence[int]) -> tuple[int, ...]:
    """``5``, ``"1,3,5"`` or ``[1, 3, 5]`` -> sorted unique ``(1, 3, 5)``; every K must be >= 1."""
    if isinstance(steps, str):
        try:
            values = [int(part) for part in steps.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"steps must be comma-separated integers like '1,3,5', got {steps!r}") from None
    elif isinstance(steps, int):
        values = [steps]
    else:
        values = [int(k) for k in steps]
    if not values or any(k < 1 for k in values):
        raise ValueError(f"steps must be integers >= 1, got {steps!r}")
    return tuple(sorted(set(values)))


class GenembedEncoder:
    """A :class:`genembed.GenerativeEmbedder` with fixed encoding settings.

    With a soft-token method (GIRCSE) it is a sweep encoder: one run with ``K = max(steps)`` gives ``z_k``
    for every requested ``k`` (``return_all_steps``), so a test-time-scaling sweep costs one run.

    Args:
        model: the loaded model (``genembed.load()``).
        method: ``gircse``, ``mean``, ``last`` or ``grit``; None: the model's own (with its steps,
            attention and prompt format unless given).
        steps: GIRCSE soft-token counts to report (e.g. ``(1, 3, 5, 10, 20)``; default ``DEFAULT_STEPS``); gircse only.
        attention, prompt_format, max_length, batch_size: as in :meth:`GenerativeEmbedder.encode`.
        center: per-instruction centering (:mod:`genembed.encoders.centering`); None: the model's
            default (``model.center``). The cache keeps raw embeddings either way;
            :class:`~genembed.eval.encoding.TextEmbedder` centers them with :meth:`center_for`.
    """

    def __init__(
        self,
        model: Any,
        *,
        method: str | None = None,
        steps: int | str | Sequence[int] | None = None,
        attention: str | None = None,
        prompt_format: str | None = None,
        max_length: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        center: bool | None = None,
    ):
        self.model = model
        if max_length is None:  # the model's (genembed.load(max_length=...)), else the default
            max_length = getattr(model, "max_length", DEFAULT_MAX_LENGTH)
        # the model's output steps (its centring unless ``center`` says otherwise, its truncate_dim), which
        # TextEmbedder applies to the raw embeddings the cache holds
        self.output = OutputPipeline.of(model, center=center)
        if method is None:  # the model's (what it was saved or trained with)
            method = getattr(model, "method", DEFAULT_METHOD)
            own_steps = getattr(model, "steps", None) if method_rules(method).uses_steps else None
            steps = own_steps if steps is None and isinstance(own_steps, int) else steps
            attention = getattr(model, "attention", None) if attention is None else attention
            prompt_format = getattr(model, "prompt_format", None) if prompt_format is None else prompt_format
        if not method_rules(method).uses_steps and steps is not None:
            raise ValueError(f"steps apply only to method {SOFT_TOKEN_METHOD!r}, not {method!r}")
        self.steps = parse_steps(DEFAULT_STEPS if steps is None else steps)
        # validates every setting and resolves the defaults (prompt format, attention) once
        self.embed_settings = EmbedSettings.build(
            method=method,
            steps=max(self.steps),
            attention=attention,
            prompt_format=prompt_format,
            tau=model.tau,
            max_length=max_length,
        )
        self.batch_size = batch_size  # texts per forward pass (changes no embedding)
        self.views: tuple[int, ...] = self.steps if method_rules(method).uses_steps else ()

    @property
    def center(self) -> bool:
        """Whether embeddings are centred (:attr:`output`)."""
        return self.output.center

    @property
    def name(self) -> str:
        o = self.embed_settings
        return f"{self.model.name} {o.method} {o.attention} {o.prompt_format}" + (" centered" if self.center else "")

    def settings(self) -> dict[str, Any]:
        """The encoding settings, for reports."""
        o = self.embed_settings
        out = {"model": self.model.backbone.name, "adapter": self.model.adapter, "method": o.method}
        out |= {"steps": list(self.steps) if method_rules(o.method).uses_steps else None, "attention": o.attention}
        out |= {"prompt_format": o.prompt_format, "max_length": o.max_length, "batch_size": self.batch_size}
        out["center"] = self.center
        return out | {
            "tau": o.tau,
            "dtype": str(next(self.model.backbone.model.parameters()).dtype).removeprefix("torch."),
        }

    @cached_property
    def cache_key(self) -> str:
        """Digest of the weights (files or tensors), adapter tensors, settings and encoding code."""
        import torch
        import transformers

        backbone = self.model.backbone
        lm = backbone.model
        from ..generation.adapters import GENERATION_ADAPTER

        generation = f".{GENERATION_ADAPTER}."  # a generation adapter's tensors do not touch the embeddings
        if backbone.path:
            weights = folder_fingerprint(backbone.path)
        else:  # an in-memory model: hash the tensors themselves
            weights = tensors_fingerprint(sorted((n, t) for n, t in lm.state_dict().items() if generation not in n))
        lora = [
            (n, p)
            for n, p in sorted(lm.named_parameters())
            if ("lora_" in n or "modules_to_save" in n) and generation not in n
        ]
        o = self.embed_settings
        return digest(
            {
                "model": [backbone.name, backbone.path, weights],
                "adapter": tensors_fingerprint(lora) if lora else None,
                "settings": [o.method, o.attention, o.prompt_format, o.max_length, o.tau],
                "dtype": str(next(lm.parameters()).dtype),
                "code": [code_fingerprint(), torch.__version__, transformers.__version__],
            }
        )

    def _encode(self, texts: list[str], instruction: str, *, all_steps: bool) -> np.ndarray:
        o = self.embed_settings
        return self.model.encode(
            texts,
            instruction=instruction,
            method=o.method,
            steps=o.steps,
            attention=o.attention,
            prompt_format=o.prompt_format,
            max_length=o.max_length,
            batch_size=self.batch_size,
            show_progress_bar=False,
            return_all_steps=all_steps,
            # raw embeddings (normalised, whole) for the cache; TextEmbedder applies self.output after it
            center=False,
            truncate_dim=self.model.dim,
        )

    def calibration_texts(self) -> tuple[str, ...] | None:
        """With centering, the texts whose mean normalised raw embedding is an instruction's center (the
        harness takes them through its cache); None without."""
        if not self.center:
            return None
        from ..encoders.centering import calibration_texts

        return calibration_texts()

    def center_for(self, instruction: str) -> np.ndarray | None:
        """The center subtracted from this instruction's normalised embeddings, ``(n_views or 1, dim)``,
        or None without centering."""
        if not self.center:
            return None
        from ..encoders.centering import instruction_center

        shift = instruction_center(self.model.backbone, self.embed_settings, instruction, all_steps=bool(self.views))
        shift = shift[[k - 1 for k in self.steps]] if self.views else shift[None]
        return shift.numpy().astype(np.float32)

    def encode(self, texts: list[str], *, instruction: str) -> np.ndarray:
        """``(n, dim)`` embeddings (for gircse, ``z_K`` with ``K = max(steps)``)."""
        return self._encode(texts, instruction, all_steps=False)

    def encode_views(self, texts: list[str], *, instruction: str) -> np.ndarray:
        """``(n, len(steps), dim)``: ``z_k`` for each requested k, from one run (gircse only)."""
        if not self.views:
            raise ValueError(f"method {self.embed_settings.method!r} has one embedding per text; use encode()")
        all_steps = self._encode(texts, instruction, all_steps=True)  # (n, K_max, dim)
        return all_steps[:, [k - 1 for k in self.steps]]


class SentenceTransformerEncoder:
    """A sentence-transformers model as a harness encoder.

    Args:
        model: a ``SentenceTransformer``.
        name: shown in reports (default: the model's folder or hub name).
        instruction_template: e.g. ``"{instruction}\\n{text}"`` to prepend instructions; None (default)
            ignores them, which is how instruction-free models such as all-MiniLM-L6-v2 are meant to be used.
        batch_size: texts per forward pass.
    """

    def __init__(
        self,
        model: Any,
        *,
        name: str | None = None,
        instruction_template: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ):
        if instruction_template is not None and "{text}" not in instruction_template:
            raise ValueError("instruction_template must contain '{text}' (and usually '{instruction}')")
        self.model = model
        self.instruction_template = instruction_template
        self.batch_size = batch_size
        self.name = name or type(model).__name__

    @classmethod
    def from_path(cls, path: str, **kwargs: Any) -> SentenceTransformerEncoder:
        """Load a local sentence-transformers folder (no network) and wrap it."""
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        kwargs.setdefault("name", str(path).rstrip("/").split("/")[-1])
        return cls(model, **kwargs)

    @cached_property
    def cache_key(self) -> str:
        import sentence_transformers

        weights = tensors_fingerprint(sorted(self.model.state_dict().items()))
        settings = [self.instruction_template, self.model.max_seq_length, sentence_transformers.__version__]
        return digest({"st": weights, "settings": settings})

    def encode(self, texts: list[str], *, instruction: str) -> np.ndarray:
        if self.instruction_template is not None and instruction:
            texts = [self.instruction_template.format(instruction=instruction, text=t) for t in texts]
        return self.model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
