"""How much memory a model's weights take and where they go: the CPU memory check before a load,
the choice of spreading a model over several GPUs (accelerate's ``device_map``), and bitsandbytes
4-/8-bit loading."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any

__all__ = [
    "BYTES_PER_PARAM",
    "QUANTIZATIONS",
    "InsufficientMemoryError",
    "available_memory",
    "check_fits_in_memory",
    "choose_device_map",
    "count_parameters",
    "quantization_config",
]

QUANTIZATIONS = ("4bit", "8bit")  # bitsandbytes weight formats load(quantization=...) takes
SKIP_CHECK_ENV = "GENEMBED_SKIP_MEMORY_CHECK"  # set to 1 to load even when the estimate says it will not fit
# bytes one weight takes when loaded as each dtype (bitsandbytes 8-bit and 4-bit: the quantized weights)
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "8bit": 1.0, "4bit": 0.5}


class InsufficientMemoryError(MemoryError):
    """The model's weights will not fit in this machine's memory; the message gives the estimate."""


def count_parameters(folder: str | os.PathLike) -> int | None:
    """Parameters in a HF folder's safetensors weights, from the files' headers (nothing is loaded);
    None when the folder has no safetensors weights."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    else:
        files = [path.name for path in sorted(folder.glob("*.safetensors")) if not path.name.startswith("adapter_")]
    if not files:
        return None
    total = 0
    for name in files:
        with open(folder / name, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        total += sum(math.prod(t["shape"]) for key, t in header.items() if key != "__metadata__")
    return total


def available_memory() -> int | None:
    """Bytes of RAM available to a new allocation (psutil, which accelerate depends on), or None."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def check_fits_in_memory(folder: str | os.PathLike, dtype: str, name: str) -> None:
    """Before a CPU load: raise when the weights in ``dtype`` clearly exceed the available RAM.

    The estimate is parameters (from the safetensors headers) x bytes per parameter; the check passes
    when either is unknown, and is skipped with ``GENEMBED_SKIP_MEMORY_CHECK=1``.

    Raises:
        InsufficientMemoryError: the estimate exceeds the available memory (the message gives both).
    """
    if os.environ.get(SKIP_CHECK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        return
    params, free = count_parameters(folder), available_memory()
    if params is None or free is None:
        return
    need = params * BYTES_PER_PARAM.get(dtype, 4.0)
    if need <= free:
        return
    raise InsufficientMemoryError(
        f"{name} needs about {need / 1e9:.1f} GB of memory for its weights alone ({params / 1e9:.2f}B "
        f"parameters x {BYTES_PER_PARAM.get(dtype, 4.0):g} bytes in {dtype}), but this machine has "
        f"{free / 1e9:.1f} GB available. Run it on a GPU (device='cuda', several GPUs with "
        "device_map='auto'), load it in 4-/8-bit on a GPU (quantization='4bit'), use bfloat16 if you "
        f"asked for float32, or set {SKIP_CHECK_ENV}=1 to try anyway."
    )


def choose_device_map(device: Any, device_map: Any, weight_bytes: float | None) -> Any:
    """The ``device_map`` to load with: the caller's, else ``"auto"`` (accelerate spreads the layers
    over the GPUs) when ``device`` is ``"auto"``, several GPUs are visible, no launcher set LOCAL_RANK,
    and the weights do not fit in 90% of the first GPU's free memory; else None (one device)."""
    if device_map is not None:
        return device_map
    if device not in (None, "auto") or "LOCAL_RANK" in os.environ:
        return None
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return None
    free, _ = torch.cuda.mem_get_info(0)
    return "auto" if weight_bytes is None or weight_bytes > 0.9 * free else None


def quantization_config(quantization: str, device: str, compute_dtype: Any) -> Any:
    """A transformers ``BitsAndBytesConfig`` for ``"4bit"`` (NF4) or ``"8bit"`` weights.

    Raises:
        ValueError: an unknown quantization, or a device other than CUDA (bitsandbytes' kernels).
        ImportError: bitsandbytes is not installed (``pip install "genembed[quant]"``).
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS} or None, got {quantization!r}")
    if not str(device).startswith("cuda"):
        raise ValueError(f"quantization={quantization!r} (bitsandbytes) needs a CUDA GPU; the device is {device}")
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ImportError(f'quantization={quantization!r} needs bitsandbytes: pip install "genembed[quant]"')
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype)
