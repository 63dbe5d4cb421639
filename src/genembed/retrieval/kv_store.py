"""Chunks' KV states on disk: safetensors shards, written atomically, memory-mapped when read.

Each shard file holds many chunks; the tensor named ``str(row)`` is that chunk's keys and values
stacked, ``(2, layers, kv_heads, tokens, head_dim)``, in float32, float16 or bfloat16. Opening a store
reads nothing: a chunk's states are paged in from the mapped file when :meth:`KVStore.get` touches
them, so a store far larger than RAM works.

Size: ``2 (K and V) x layers x kv_heads x head_dim x bytes per value`` per token
(:func:`kv_bytes_per_token`). For SmolLM2-135M (30 layers, 3 KV heads, head_dim 64) that is 46,080 B
per token in float32 and half of it in float16/bfloat16.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._files import atomic_write
from .errors import IndexCorruptedError, rebuild_hint
from .kv_ops import KV

__all__ = ["KV_DTYPES", "KVStore", "KVGeometry", "kv_bytes_per_token", "resolve_kv_dtype", "write_kv_shard"]

KV_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def resolve_kv_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"float16"``/``"fp16"``/``"bf16"``/... (or a torch dtype) -> torch dtype, with a clear error."""
    if isinstance(name, torch.dtype):
        if name not in KV_DTYPES.values():
            raise ValueError(f"KV dtype must be float32, float16 or bfloat16, got {name}")
        return name
    key = str(name).lower().removeprefix("torch.")
    if key not in KV_DTYPES:
        raise ValueError(f"KV dtype must be one of float32, float16, bfloat16 (or fp32/fp16/bf16), got {name!r}")
    return KV_DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class KVGeometry:
    """The shape of one token's KV states: ``layers x kv_heads x head_dim`` keys and as many values."""

    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, model_config: Any) -> KVGeometry:
        """From a transformers config (``num_hidden_layers``, ``num_key_value_heads``, ``head_dim``)."""
        heads = model_config.num_attention_heads
        kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
        head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // heads
        return cls(int(model_config.num_hidden_layers), int(kv_heads), int(head_dim))

    def bytes_per_token(self, dtype: str | torch.dtype = "float32") -> int:
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str | torch.dtype = "float32") -> int:
    """Bytes of KV states per token: ``2 * layers * kv_heads * head_dim * itemsize``."""
    itemsize = torch.empty((), dtype=resolve_kv_dtype(dtype)).element_size()
    return 2 * layers * kv_heads * head_dim * itemsize


def write_kv_shard(
    path: Path, rows: Sequence[int], states: Sequence[KV], *, dtype: torch.dtype, metadata: dict[str, str]
) -> int:
    """Write chunks' states to one safetensors file atomically (temp file + rename); return its size.

    Args:
        path: the shard file to create (replaced if it exists).
        rows: each chunk's row number in the index (the tensor name).
        states: each chunk's ``(keys, values)``, ``(layers, H, L, Dh)`` each.
        dtype: storage dtype.
        metadata: string metadata stored in the file header (e.g. format version, model name).
    """
    from safetensors.torch import save_file

    if len(rows) != len(states):
        raise ValueError(f"{len(rows)} rows but {len(states)} states")
    tensors = {str(row): torch.stack([k, v]).to(dtype).contiguous() for row, (k, v) in zip(rows, states, strict=True)}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata={**metadata, "dtype": dtype_name(dtype)}))
    return path.stat().st_size


class KVStore:
    """Read-only, memory-mapped access to the KV states of an index's chunks.

    Args:
        root: the index folder (shard paths are relative to it).
        shards: ``[{"file": ..., "start": first row, "stop": last row + 1}, ...]`` from the manifest.
    """

    def __init__(self, root: Path, shards: list[dict[str, Any]]):
        self.root = Path(root)
        self.shards = sorted(shards, key=lambda s: s["start"])
        self._handles: dict[str, Any] = {}

    def _shard_of(self, row: int) -> dict[str, Any]:
        for shard in self.shards:
            if shard["start"] <= row < shard["stop"]:
                return shard
        raise KeyError(f"no KV states stored for chunk {row}")

    def __contains__(self, row: int) -> bool:
        return any(s["start"] <= row < s["stop"] for s in self.shards)

    def _handle(self, row: int) -> tuple[str, Any]:
        from safetensors import safe_open

        name = self._shard_of(row)["file"]
        if name not in self._handles:
            path = self.root / name
            try:
                self._handles[name] = safe_open(str(path), framework="pt")
            except Exception as exc:  # missing file, truncated header, bad JSON header
                raise IndexCorruptedError(
                    f"KV shard {path} cannot be opened: {exc}. {rebuild_hint(self.root)}"
                ) from exc
        return name, self._handles[name]

    def tokens(self, row: int) -> int:
        """How many positions chunk ``row``'s states hold (read from the shard header, no data)."""
        return int(self._handle(row)[1].get_slice(str(row)).get_shape()[3])

    def get(self, row: int) -> KV:
        """Chunk ``row``'s ``(keys, values)``, ``(layers, kv_heads, tokens, head_dim)``, memory-mapped."""
        name, _ = self._handle(row)
        try:
            both = self._handles[name].get_tensor(str(row))  # (2, layers, H, L, Dh), backed by the mapped file
        except Exception as exc:
            raise IndexCorruptedError(
                f"KV shard {self.root / name} has no readable entry for chunk {row}: {exc}. {rebuild_hint(self.root)}"
            ) from exc
        return both[0], both[1]

    @property
    def nbytes(self) -> int:
        """Bytes on disk of all shards."""
        return sum((self.root / s["file"]).stat().st_size for s in self.shards)
