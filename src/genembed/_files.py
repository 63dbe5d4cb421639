"""Files genembed writes and reads: atomic writes, reads that name a damaged file, and JSON-lines input.

Every file genembed writes goes through :func:`atomic_write` (or one of its ``atomic_write_*`` forms):
a temporary file beside the target, renamed into place, so a crash never leaves half a file.

A writer records :func:`file_digest` (byte size and SHA-256) in its manifest; a reader passes it back
as ``expected``. Every read either returns the content or raises :class:`DamagedFileError` (or the
caller's subclass of it) whose message names the file, says what is wrong and what to do (``fix``).
Arrays are read without pickle (``allow_pickle=False``); tensors only from safetensors.

Input the user writes (training data, eval tasks, documents to index, a corpus to encode) is read
with :func:`read_jsonl` and checked with :func:`require_field`; every problem raises
:class:`FileFormatError` (or the caller's subclass of it) whose message is ``file:line: field ...``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DamagedFileError",
    "FileFormatError",
    "atomic_write",
    "atomic_write_files",
    "atomic_write_json",
    "atomic_write_npy",
    "atomic_write_text",
    "check_file",
    "check_safetensors",
    "count_lines",
    "file_digest",
    "read_json",
    "read_jsonl",
    "read_lines",
    "read_npy",
    "parse_jsonl_line",
    "publish_file",
    "read_safetensors",
    "remove_temp_files",
    "require_field",
    "sha256_file",
]


class DamagedFileError(RuntimeError):
    """A file genembed wrote (or was given) is missing, truncated or altered; the message names it."""


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``path`` and rename it into place.

    A crash leaves either the old file or the new one, never a half-written ``path``. The temporary
    name is unique, so two writers of one path (threads or processes) never share it; the last rename wins.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        write(tmp)
        publish_file(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def publish_file(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename the finished file ``tmp`` (in ``path``'s folder) to ``path``, durably: for files written
    piece by piece under another name (a resumable ``.partial`` file) rather than by :func:`atomic_write`."""
    os.chmod(tmp, 0o644)  # mkstemp and some writers create 0600 files; an index is meant to be shared
    with open(tmp, "rb+") as handle:  # make the bytes durable before the rename publishes them
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_write_text(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    atomic_write(path, lambda tmp: tmp.write_bytes(payload))


@contextlib.contextmanager
def atomic_write_files(folder: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder inside ``folder``; when the block succeeds, move every file written
    there into ``folder``, each atomically (a crash leaves each file old or new, never half-written).

    For writers that write several files into a folder at once (``save_pretrained``), in a folder that
    holds other files too (otherwise :func:`~genembed.backbone.cache.atomic_directory` swaps the folder).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".files.tmp-") as tmp:
        yield Path(tmp)
        for file in sorted(Path(tmp).iterdir()):
            if file.is_dir():  # a subfolder moves as it is (a writer's own layout)
                os.replace(file, folder / file.name)
            else:
                publish_file(file, folder / file.name)


def remove_temp_files(folder: Path) -> None:
    """Delete the ``.<name>.tmp-*`` files and folders that writers killed mid-write left in ``folder``
    (:func:`atomic_write`, :func:`~genembed.backbone.cache.atomic_directory`). Call it only while no
    other process writes there."""
    for tmp in Path(folder).glob(".*.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)


def atomic_write_json(path: str | os.PathLike, data: Any, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def atomic_write_npy(path: str | os.PathLike, array: np.ndarray) -> None:
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


# ---------------------------------------------------------------- JSON-lines input


class FileFormatError(ValueError):
    """An input file does not follow its format; the message is ``file:line: what is wrong`` and names
    the field. ``path`` and ``line`` (None for a whole-file problem) are kept as attributes."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, message: str):
        self.path = None if path is None else str(path)
        self.line, self.message = line, message
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(message if where is None else f"{where}: {message}")

    def __reduce__(self) -> tuple:  # the constructor takes three arguments, so unpickling must pass them
        return type(self), (self.path, self.line, self.message)


def read_lines(path: str | os.PathLike, *, error: type[FileFormatError] = FileFormatError) -> Iterator[tuple[int, str]]:
    """Stream ``(line number, line)`` for every non-blank line of a UTF-8 text file (line ends kept).

    Lines are split at ``\\n`` only, as :func:`count_lines` counts them.

    Raises:
        FileFormatError (``error``): the file is missing, or a line is not UTF-8.
    """
    path = Path(path)
    if not path.is_file():
        raise error(path, None, "file not found")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(path, number, f"not UTF-8 text (byte {exc.start} of the line: {exc.reason})") from None
            if line.strip():
                yield number, line


def count_lines(path: str | os.PathLike) -> int:
    """Non-blank lines of a text file, counted without decoding them."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def parse_jsonl_line(
    line: str,
    path: str | os.PathLike,
    number: int,
    *,
    error: type[FileFormatError] = FileFormatError,
    expected: str = "a JSON object",
    strings: bool = False,
) -> Any:
    """One JSON-lines line as a dict (or, with ``strings``, a bare JSON string too).

    ``expected`` says what a line must hold, for the error message.
    """
    try:
        obj = json.loads(line.rstrip("\r\n"))  # without the line end, a truncated line's error column is on it
    except json.JSONDecodeError as exc:
        raise error(path, number, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict) and not (strings and isinstance(obj, str)):
        raise error(path, number, f"each line must be {expected}, got {type(obj).__name__}")
    return obj


def read_jsonl(
    path: str | os.PathLike,
    *,
    error: type[FileFormatError] = FileFormatError,
    expected: str = "a JSON object",
    allow_empty: bool = False,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line number, object)`` for every non-blank line; each line must be one JSON object.

    Args:
        path: a UTF-8 JSON-lines file.
        error: the :class:`FileFormatError` subclass to raise.
        expected: what each line must hold, as the error message says it ("a JSON object with 'id'").
        allow_empty: a file without rows is fine; otherwise it is an error, raised once the file is
            read to its end.

    Raises:
        FileFormatError (``error``): the file is missing or holds no rows, or a line is not UTF-8 or
            not a JSON object; the message names the file and the line.
    """
    found = False
    for number, line in read_lines(path, error=error):
        found = True
        yield number, parse_jsonl_line(line, path, number, error=error, expected=expected)
    if not found and not allow_empty:
        raise error(path, None, "holds no rows")


_MISSING: Any = object()
_KIND_NAMES = {str: "a string", int: "an integer", float: "a finite number", dict: "an object", list: "a list"}


def require_field(
    obj: dict[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    path: str | os.PathLike,
    line: int | None = None,
    *,
    error: type[FileFormatError] = FileFormatError,
    default: Any = _MISSING,
    nonblank: bool = False,
    want: str | None = None,
) -> Any:
    """``obj[key]``, checked to be of ``kind`` (a type or a tuple of types), else an error naming the
    file, the line and the field.

    JSON booleans are never integers or numbers; ``float`` takes any finite number (an int too).

    Args:
        default: returned when ``key`` is absent; without it a missing field is an error.
        nonblank: a string value must hold more than white space.
        want: what the message says the field must be ("a list of strings"), if not named by ``kind``.
    """
    if key not in obj:
        if default is not _MISSING:
            return default
        raise error(path, line, f"missing field {key!r} (fields: {sorted(obj)})")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not any(_is_kind(value, k) for k in kinds):
        want = want or " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        shown = json.dumps(value, ensure_ascii=False, default=str)
        got = f"{type(value).__name__} {shown[:60]}{'...' if len(shown) > 60 else ''}"
        raise error(path, line, f"field {key!r} must be {want}, got {got}")
    if nonblank and isinstance(value, str) and not value.strip():
        raise error(path, line, f"field {key!r} is empty")
    return value


def _is_kind(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, kind)
