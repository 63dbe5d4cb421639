"""Load a decoder LLM and its tokenizer from a local folder, a ``.gguf`` file, the local HF cache,
or the bundled default. Nothing is ever downloaded."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cache import atomic_directory, cache_root
from .default_model import DEFAULT_MODEL_NAME, MissingModelError, default_gguf_path
from .device import resolve_device

__all__ = ["BUNDLED", "Backbone", "default_dtype", "hub_cache_folder", "load_backbone", "resolve_dtype"]

BUNDLED = "bundled"  # Backbone.source of the bundled default (load_backbone(None))

logger = logging.getLogger(__name__)

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
_DTYPES |= {"float16": "float16", "fp16": "float16"}


@dataclass
class Backbone:
    """A loaded causal LM, its tokenizer and a stable name (used in cache keys and reports)."""

    model: Any  # transformers PreTrainedModel (a peft.PeftModel once an adapter is attached)
    tokenizer: Any
    name: str
    path: str | None = None
    # what loads these weights again: a hub id, an absolute path, BUNDLED for the bundled default, or
    # None for a model built in memory (genembed.saving writes it into genembed.json)
    source: str | None = None


def default_dtype(device: str = "cpu") -> str:
    """The weights dtype ``dtype="auto"`` picks: ``"bfloat16"`` where ``device`` computes it natively (a CPU
    with AVX512-BF16 or AMX, a CUDA GPU with bf16 support), else ``"float32"``.

    bfloat16 encodes 1.6-1.7x faster on such CPUs and moves dev STS scores by at most 0.08 points
    (``benchmarks/bf16_quality.py``, docs/performance.md); without native support it is much slower
    than float32. The environment variable ``GENEMBED_DTYPE`` (e.g. ``float32``) overrides the choice.
    """
    import torch

    forced = os.environ.get("GENEMBED_DTYPE")
    if forced:
        return _DTYPES.get(forced.removeprefix("torch."), forced)
    if str(device).startswith("cuda"):
        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    if str(device) == "cpu" or str(device).startswith("cpu:"):
        native = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return "bfloat16" if any(check is not None and check() for check in native) else "float32"
    return "float32"


def resolve_dtype(dtype: Any, device: str = "cpu") -> Any:
    """Map ``"float32"``/``"bf16"``/``"auto"``/... (or a torch dtype) to a torch dtype, with a clear error.

    ``"auto"`` is :func:`default_dtype` for ``device``.
    """
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        dtype = default_dtype(device)
    key = str(dtype).removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(set(_DTYPES.values()))}, got {dtype!r}")
    return getattr(torch, _DTYPES[key])


def load_backbone(model: str | os.PathLike | None = None, *, dtype: Any = "auto", device: str = "cpu") -> Backbone:
    """Load a causal LM and tokenizer.

    Args:
        model: None for the bundled default (SmolLM2-135M-Instruct), a local HF folder, a local
            ``.gguf`` file, or a hub id already in the local HF cache.
        dtype: ``"auto"`` (:func:`default_dtype`), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: a torch device string, or ``"auto"`` (:func:`~genembed.backbone.device.resolve_device`).

    Returns:
        A :class:`Backbone` in eval mode.

    Raises:
        MissingModelError: the model is not available locally; the message says how to get it.
    """
    from transformers import AutoModelForCausalLM

    from .tokenizer import load_tokenizer

    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    if model is None:
        folder, name, source = converted_gguf_folder(default_gguf_path()), DEFAULT_MODEL_NAME, BUNDLED
    else:
        path = Path(os.path.expanduser(str(model)))
        if path.suffix == ".gguf":
            if not path.is_file():
                raise MissingModelError(f"GGUF file not found: {path}")
            folder, name, source = converted_gguf_folder(path), path.stem, str(path.resolve())
        elif path.is_dir():
            if not (path / "config.json").is_file():
                raise MissingModelError(f"{path} is a folder but holds no config.json: not a HF model folder")
            folder, name, source = path, path.name, str(path.resolve())
        else:
            folder, name, source = hub_cache_folder(str(model)), str(model), str(model)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folder)
    lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch_dtype)
    lm.to(device).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    logger.info("loaded %s from %s in %.1fs", name, folder, time.perf_counter() - t0)
    return Backbone(model=lm, tokenizer=tokenizer, name=name, path=str(folder), source=source)


def hub_cache_folder(repo_id: str) -> Path:
    """The snapshot folder of a hub id already in the local HF cache (``HF_HOME``/``HF_HUB_CACHE``,
    default ``~/.cache/huggingface/hub``); never goes online.

    Raises:
        MissingModelError: ``repo_id`` looks like a path, or is not in the cache.
    """
    looks_like_path = repo_id.startswith((".", "/", "~")) or os.sep in repo_id.strip("/").replace("/", "", 1)
    how = (
        "This machine loads models only from disk. Pass a local HF folder or .gguf file, or download "
        f"the model where you have internet (`hf download {repo_id}`) and copy the HF cache "
        "(HF_HOME, default ~/.cache/huggingface) here."
    )
    if looks_like_path:
        raise MissingModelError(f"Model path does not exist: {repo_id}. {how}")
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id, local_files_only=True)
    except Exception as exc:  # huggingface_hub raises several types for "not cached" / "bad id"
        raise MissingModelError(f"Model {repo_id!r} is not a local folder, .gguf file or cached hub id. {how}") from exc
    return Path(folder)


def converted_gguf_folder(gguf: Path) -> Path:
    """Convert a GGUF file once into a safetensors folder in the cache; return that folder.

    Loading a GGUF through transformers dequantizes every tensor (~20 s for the default model); the
    converted folder loads in well under a second. The folder is written atomically.
    """
    gguf = Path(gguf).resolve()
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    target = cache_root() / "models" / f"{gguf.stem}-{key}"
    if (target / "config.json").is_file():
        return target
    logger.warning("converting %s to safetensors once (cached in %s)", gguf.name, target)
    with atomic_directory(target) as tmp:
        _convert_gguf(gguf, tmp)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    try:
        import gguf as _gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError as exc:
        raise MissingModelError("Reading .gguf files needs the `gguf` package: pip install gguf") from exc
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # A GGUF-loaded model carries a quantization config and cannot be save_pretrained directly:
    # copy its (dequantized) weights into a fresh model built from a clean config.
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config = AutoConfig.for_model(**config_dict)
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), assign=True, strict=True)
    fresh.tie_weights()
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
