"""``genembed.load``: backbone + optional LoRA adapter -> :class:`GenerativeEmbedder`."""

from __future__ import annotations

import os
from pathlib import Path

from .adapter_info import read_trained_for
from .backbone.loading import load_backbone
from .model import GenerativeEmbedder

__all__ = ["DEFAULT_ADAPTER", "adapter_folder", "default_adapter", "load", "trained_for_generation"]

# the GIRCSE LoRA adapter trained for the bundled backbone (configs/gircse-smollm2.yaml, MODEL_CARD.md)
DEFAULT_ADAPTER = Path(__file__).parent / "adapters" / "smollm2-135m-gircse"


def default_adapter() -> Path | None:
    """The adapter shipped for the bundled backbone, or None in a build that does not hold it."""
    return DEFAULT_ADAPTER if (DEFAULT_ADAPTER / "adapter_config.json").is_file() else None


def load(
    model: str | os.PathLike | None = None,
    adapter: str | os.PathLike | None | bool = None,
    dtype: str = "auto",
    device: str = "cpu",
    *,
    tau: float = 1.0,
    center: bool | None = None,
) -> GenerativeEmbedder:
    """Load a model for embedding (and generation, reranking, RAG).

    Args:
        model: None for the bundled default (SmolLM2-135M-Instruct), a local HF folder, a ``.gguf``
            file, or a hub id already in the local HF cache. Nothing is downloaded.
        adapter: a LoRA adapter folder (as written by ``genembed train``). None: the shipped GIRCSE
            adapter when ``model`` is the bundled default, none for any other model. False: none
            (the raw backbone). A GRIT jointly trained adapter (see :func:`trained_for_generation`)
            is used for generation too (``model.generation_adapter = True``); an embedding-only adapter,
            like the shipped one, only for embedding. What the adapter was trained for is read from
            its saved training config (``model.trained_for``, :mod:`genembed.adapter_info`); ``encode``
            warns when asked for another method or attention.
        dtype: ``"auto"`` (default: bfloat16 where the device computes it natively, such as CPUs with
            AVX512-BF16 or AMX, else float32; see :func:`genembed.backbone.default_dtype`; the
            environment variable ``GENEMBED_DTYPE`` overrides it), ``"float32"``, ``"bfloat16"`` or
            ``"float16"``.
        device: a torch device, e.g. ``"cpu"`` or ``"cuda:0"``.
        tau: GIRCSE soft-token softmax temperature.
        center: per-instruction centering in ``encode`` by default (see
            :mod:`genembed.encoders.centering`). None: on with the shipped adapter, where it was
            measured to help (MODEL_CARD.md), off otherwise.

    Raises:
        MissingModelError: the model or adapter is not on disk; the message says how to get it.
    """
    backbone = load_backbone(model, dtype=dtype, device=device)
    if adapter is None and model is None:
        adapter = default_adapter()
    adapter_path, trained_for, shipped = None, None, False
    if adapter not in (None, False):
        adapter_path = Path(os.path.expanduser(str(adapter)))
        attach_adapter(backbone, adapter_path)
        trained_for = read_trained_for(adapter_path)
        shipped = adapter_path.resolve() == DEFAULT_ADAPTER.resolve()
    model = GenerativeEmbedder(
        backbone,
        tau=tau,
        adapter=adapter_path.name if adapter_path else None,
        center=shipped if center is None else center,
    )
    model.adapter_path = str(adapter_path.resolve()) if adapter_path else None
    model.trained_for = trained_for
    model.generation_adapter = bool(trained_for and trained_for.generation)
    return model


def trained_for_generation(adapter_path: str | os.PathLike) -> bool:
    """Whether the adapter in ``adapter_path`` was trained with a next-token loss (GRIT joint training).

    Read from the training config saved beside it (``genembed_train.yaml`` or ``training_config.yaml``):
    generative files with a positive weight. Such an adapter also runs chat, reranking and RAG; an
    embedding-only one (or one without a saved config) leaves them on the base weights.
    """
    trained_for = read_trained_for(adapter_path)
    return bool(trained_for and trained_for.generation)


def adapter_folder(path: str | os.PathLike, what: str = "adapter folder") -> Path:
    """``path`` as a Path, checked to hold a peft LoRA adapter; ``what`` names it in the error.

    Raises:
        MissingModelError: no ``adapter_config.json`` in ``path``.
    """
    from .backbone.default_model import MissingModelError

    folder = Path(os.path.expanduser(str(path)))
    if not (folder / "adapter_config.json").is_file():
        raise MissingModelError(f"{what} {folder} holds no adapter_config.json (a peft LoRA adapter)")
    return folder


def attach_adapter(backbone, adapter_path: Path) -> None:
    """Wrap the backbone's model with a saved LoRA adapter (peft), in eval mode."""
    from peft import PeftModel

    backbone.model = PeftModel.from_pretrained(backbone.model, str(adapter_folder(adapter_path))).eval()
