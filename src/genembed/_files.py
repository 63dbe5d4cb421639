"""Files genembed writes and reads back: atomic writes, and reads that name a damaged file.

A writer records :func:`file_digest` (byte size and SHA-256) in its manifest; a reader passes it back
as ``expected``. Every read either returns the content or raises :class:`DamagedFileError` (or the
caller's subclass of it) whose message names the file, says what is wrong and what to do (``fix``).
Arrays are read without pickle (``allow_pickle=False``); tensors only from safetensors.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DamagedFileError",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_npy",
    "check_file",
    "check_safetensors",
    "file_digest",
    "read_json",
    "read_npy",
    "read_safetensors",
    "remove_temp_files",
    "sha256_file",
]


class DamagedFileError(RuntimeError):
    """A file genembed wrote (or was given) is missing, truncated or altered; the message names it."""


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``path`` and rename it into place.

    A crash leaves either the old file or the new one, never a half-written ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # some writers create 0600 temp files; an index is meant to be shared
        with open(tmp, "rb+") as handle:  # make the bytes durable before the rename publishes them
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_temp_files(folder: Path) -> None:
    """Delete the ``.<name>.tmp-*`` files and folders that writers killed mid-write left in ``folder``
    (:func:`atomic_write`, :func:`~genembed.backbone.cache.atomic_directory`). Call it only while no
    other process writes there."""
    for tmp in Path(folder).glob(".*.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)


def atomic_write_json(path: Path, data: Any, indent: int | None = 2) -> None:
    text = json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text, "utf-8"))


def atomic_write_npy(path: Path, array: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:  # np.save on a path would append ".npy" to the temp name
            np.save(handle, array, allow_pickle=False)

    atomic_write(path, write)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex digest}`` of a file, to record at write time."""
    return {"bytes": Path(path).stat().st_size, "sha256": sha256_file(path)}


def check_file(
    path: Path, expected: dict[str, Any] | None = None, *, fix: str, error: type[Exception] = DamagedFileError
) -> None:
    """Raise ``error`` unless ``path`` exists and matches ``expected`` (its ``bytes`` and ``sha256``, each
    optional); the message names the file and ends with ``fix``, what to do about it."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path} is missing. {fix}")
    expected = expected or {}
    size = path.stat().st_size
    if "bytes" in expected and size != expected["bytes"]:
        raise error(f"{path} has {size} bytes, {expected['bytes']} were written: the file is damaged. {fix}")
    if "sha256" in expected and sha256_file(path) != expected["sha256"]:
        raise error(f"{path} does not match its checksum (SHA-256, recorded when written): it is damaged. {fix}")


def read_json(
    path: Path, expected: dict[str, Any] | None = None, *, fix: str, error: type[Exception] = DamagedFileError
) -> Any:
    """The parsed JSON file ``path``, checked against ``expected`` (``bytes``, ``sha256``)."""
    data = _read(path, expected, fix, error)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path} is not valid JSON ({exc}): the file is damaged. {fix}") from exc


def read_npy(
    path: Path, expected: dict[str, Any] | None = None, *, fix: str, error: type[Exception] = DamagedFileError
) -> np.ndarray:
    """A ``.npy`` array (never pickled objects), checked against ``expected``: ``bytes``, ``sha256``,
    ``shape`` and ``dtype``, each optional."""
    data = _read(path, expected, fix, error)
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise error(f"{path} is not a readable .npy array ({exc}): the file is damaged. {fix}") from exc
    expected = expected or {}
    if "shape" in expected and list(array.shape) != list(expected["shape"]):
        raise error(f"{path} holds an array of shape {list(array.shape)}, expected {list(expected['shape'])}. {fix}")
    if "dtype" in expected and str(array.dtype) != expected["dtype"]:
        raise error(f"{path} holds {array.dtype} values, expected {expected['dtype']}. {fix}")
    return array


def read_safetensors(
    path: Path, expected: dict[str, Any] | None = None, *, fix: str, error: type[Exception] = DamagedFileError
) -> dict[str, Any]:
    """All tensors of a safetensors file (CPU torch tensors), checked against ``expected``."""
    from safetensors.torch import load

    data = _read(path, expected, fix, error)
    try:
        return load(data)
    except Exception as exc:  # SafetensorError: bad header, or data not covering the header's tensors
        raise error(f"{path} is not a readable safetensors file ({exc}): the file is damaged. {fix}") from exc


def _read(path: Path, expected: dict[str, Any] | None, fix: str, error: type[Exception]) -> bytes:
    check_file(path, expected, fix=fix, error=error)
    return Path(path).read_bytes()


def check_safetensors(path: Path, *, fix: str, error: type[Exception] = DamagedFileError) -> None:
    """Check that ``path`` is a complete safetensors file (header parsed, size matching it) without
    reading its tensors."""
    from safetensors import safe_open

    check_file(path, fix=fix, error=error)
    try:
        with safe_open(str(path), framework="pt"):
            pass
    except Exception as exc:
        raise error(f"{path} is not a readable safetensors file ({exc}): the file is damaged. {fix}") from exc
