"""Load a decoder LLM and its tokenizer from a local folder, a ``.gguf`` file, a hub id (the HF cache,
downloaded when missing: :mod:`genembed.backbone.hub`), or the bundled default (never downloaded)."""

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
    # None for a model built in memory (genembed.models.save writes it into genembed.json)
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


def load_backbone(
    model: str | os.PathLike | None = None,
    *,
    dtype: Any = "auto",
    device: str = "cpu",
    local_files_only: bool = False,
    device_map: Any = None,
    quantization: str | None = None,
) -> Backbone:
    """Load a causal LM and tokenizer.

    Args:
        model: None for the bundled default (SmolLM2-135M-Instruct, never downloaded), a local HF
            folder, a local ``.gguf`` file, or a hub id: from the local HF cache, downloaded into it
            when missing (:func:`~genembed.backbone.hub.hub_snapshot`).
        dtype: ``"auto"`` (:func:`default_dtype`), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: a torch device string, or ``"auto"`` (:func:`~genembed.backbone.device.resolve_device`;
            with several GPUs a model too large for the first one is spread over all of them).
        local_files_only: never download (``HF_HUB_OFFLINE=1`` does the same).
        device_map: accelerate's placement of the layers (``"auto"``, or a dict); None: one device.
        quantization: ``"4bit"`` or ``"8bit"`` weights through bitsandbytes (CUDA only); None: ``dtype``.

    Returns:
        A :class:`Backbone` in eval mode.

    Raises:
        MissingModelError: the model is not available (not on disk, and not downloadable); the message
            says how to get it.
        InsufficientMemoryError: a CPU load whose weights will not fit in the available memory.
        ValueError / ImportError: a bad quantization, or bitsandbytes missing or without a GPU.
    """
    from transformers import AutoModelForCausalLM

    from .hub import hub_snapshot
    from .memory import (
        BYTES_PER_PARAM,
        check_fits_in_memory,
        choose_device_map,
        count_parameters,
        quantization_config,
    )
    from .tokenizer import load_tokenizer

    requested, device = device, resolve_device(device)
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
                hint = (
                    f": it holds a LoRA adapter (adapter_config.json); load it on its backbone with "
                    f"genembed.load(adapter={str(path)!r}) or --adapter {path}"
                    if (path / "adapter_config.json").is_file()
                    else ": not a HF model folder"
                )
                raise MissingModelError(f"{path} is a folder but holds no config.json{hint}")
            folder, name, source = path, path.name, str(path.resolve())
        else:
            folder, name, source = hub_snapshot(str(model), local_files_only=local_files_only), str(model), str(model)
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    weight_dtype = quantization or str(torch_dtype).removeprefix("torch.")
    if quantization is not None:
        kwargs["quantization_config"] = quantization_config(quantization, device, torch_dtype)
        kwargs["device_map"] = device_map or {"": device}
    else:
        params = count_parameters(folder)
        placement = choose_device_map(requested, device_map, params and params * BYTES_PER_PARAM[weight_dtype])
        if placement is not None:
            kwargs["device_map"] = placement
        elif device == "cpu":
            check_fits_in_memory(folder, weight_dtype, name)
    merged = _merged_adapter_base(folder)
    if merged is not None:  # a config.json beside a LoRA adapter and no weights: the base with it merged
        backbone = load_backbone(
            merged,
            dtype=dtype,
            device=requested,
            local_files_only=local_files_only,
            device_map=device_map,
            quantization=quantization,
        )
        return _merge_adapter(backbone, folder, name, source)
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(folder)
    lm, info = AutoModelForCausalLM.from_pretrained(str(folder), output_loading_info=True, **kwargs)
    head, embeddings = lm.get_output_embeddings(), lm.get_input_embeddings()
    if "lm_head.weight" in info.get("missing_keys", ()) and head is not None and head.weight is not embeddings.weight:
        # an embedding checkpoint saved without its LM head (Qwen3-Embedding, e5-mistral, gte-Qwen2 save the
        # bare decoder stack): read logits against the input embeddings, not a random head, for what
        # generates (soft tokens, chat)
        logger.info("%s has no LM head; tying it to the input embeddings", name)
        head.weight = embeddings.weight
    if "device_map" not in kwargs:  # accelerate placed (and bitsandbytes quantized) the others already
        lm.to(device)
    lm.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    logger.info("loaded %s from %s in %.1fs", name, folder, time.perf_counter() - t0)
    return Backbone(model=lm, tokenizer=tokenizer, name=name, path=str(folder), source=source)


_WEIGHTS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")


def _merged_adapter_base(folder: Path) -> str | None:
    """The base model of a folder that holds a model ``config.json`` and a LoRA adapter but no weights of
    its own (LLM2Vec's ``-mntp`` repos), or None for any other folder."""
    import json

    adapter = folder / "adapter_config.json"
    if not adapter.is_file():
        return None
    weights = [f for pattern in _WEIGHTS for f in folder.glob(pattern) if not f.name.startswith("adapter_model")]
    if weights:
        return None
    base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise MissingModelError(f"{adapter} names no base model (base_model_name_or_path) and {folder} has no weights")
    return base


def _merge_adapter(backbone: Backbone, folder: Path, name: str, source: str) -> Backbone:
    """``backbone`` with the LoRA adapter in ``folder`` merged into its weights (as llm2vec's
    ``from_pretrained`` merges an ``-mntp`` repo's adapter), named as the folder's model."""
    from peft import PeftModel

    from .tokenizer import load_tokenizer

    merged = PeftModel.from_pretrained(backbone.model, str(folder)).merge_and_unload().eval()
    logger.info("merged the LoRA adapter of %s into its base %s", folder, backbone.name)
    tokenizer = backbone.tokenizer
    if (folder / "tokenizer_config.json").is_file():  # the folder's own tokenizer, as llm2vec loads it
        tokenizer = load_tokenizer(folder)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    return Backbone(model=merged, tokenizer=tokenizer, name=name, path=str(folder), source=source)


def hub_cache_folder(repo_id: str) -> Path:
    """The snapshot folder of a hub id already in the local HF cache; never goes online
    (:func:`~genembed.backbone.hub.hub_snapshot` with ``local_files_only=True``).

    Raises:
        MissingModelError: ``repo_id`` is a path that does not exist, or is not in the cache.
    """
    from .hub import hub_snapshot

    return hub_snapshot(repo_id, local_files_only=True)


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
