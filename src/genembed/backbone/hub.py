"""Hub ids to local folders: the standard Hugging Face cache first, a download (``huggingface_hub``) when
the model is not there and downloads are allowed.

A download shows huggingface_hub's progress bars, resumes where an interrupted one stopped, and goes
into the standard cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, default ``~/.cache/huggingface/hub``),
where ``hf download`` puts models too. Downloads are off with ``HF_HUB_OFFLINE=1`` or
``local_files_only=True``; a model missing then fails at once with a :class:`MissingModelError` that
names it and says how to fetch it. The bundled default model never comes through here.
"""

from __future__ import annotations

import json
import logging
import os
from fnmatch import fnmatch
from pathlib import Path

from .default_model import MissingModelError

__all__ = ["cached_snapshot", "downloads_allowed", "hub_cache_dir", "hub_snapshot", "looks_like_path"]

logger = logging.getLogger(__name__)

_TRUE = {"1", "on", "yes", "true"}
# files a model never needs when it has safetensors weights (other frameworks' copies, original
# checkpoints); without safetensors the *.bin weights are kept
_ALWAYS_SKIPPED = ["*.pth", "*.pt", "*.h5", "*.msgpack", "*.onnx", "*.ot", "*.gguf", "consolidated*", "original/*"]
_MARKERS = ("config.json", "adapter_config.json", "genembed.json")  # what makes a snapshot a model


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder, read from the environment at call time."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def downloads_allowed(local_files_only: bool = False) -> bool:
    """False with ``local_files_only`` or ``HF_HUB_OFFLINE`` set (read at call time), else True."""
    from huggingface_hub import constants

    offline = os.environ.get("HF_HUB_OFFLINE")
    offline_mode = offline.strip().lower() in _TRUE if offline is not None else constants.HF_HUB_OFFLINE
    return not (local_files_only or offline_mode)


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is a file-system path rather than a hub id (``org/name`` or ``name``): it starts
    with ``.``, ``/`` or ``~``, has more than one ``/``, is not a valid repo id, or its first part is a
    local folder."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if name.startswith((".", "/", "~")) or os.sep in name.replace("/", "", 1) or name.count("/") > 1:
        return True
    try:
        validate_repo_id(name)
    except HFValidationError:
        return True
    return "/" in name and Path(name).parent.is_dir()


def hub_snapshot(repo_id: str, *, local_files_only: bool = False) -> Path:
    """The local folder of hub model ``repo_id``: its snapshot in the HF cache, downloaded first when it
    is missing or incomplete and downloads are allowed (:func:`downloads_allowed`).

    Raises:
        MissingModelError: ``repo_id`` is a path that does not exist; or the model is not cached and
            downloads are off; or the download failed (not found, gated, no connection). The message
            names the model and how to get it.
    """
    if looks_like_path(repo_id):
        raise MissingModelError(f"Model path does not exist: {repo_id}")
    cached = _snapshot_in_cache(repo_id)
    if cached is not None and _complete(cached):
        return cached
    cache = hub_cache_dir()
    how = (
        f"Fetch it where you have internet with `hf download {repo_id}` and copy the Hugging Face cache "
        "(HF_HOME, default ~/.cache/huggingface) here, or pass a local folder."
    )
    if not downloads_allowed(local_files_only):
        state = "is only partly in" if cached is not None else "is not in"
        raise MissingModelError(
            f"Model {repo_id!r} {state} the local Hugging Face cache ({cache}) and downloads are off "
            f"({'local_files_only=True' if local_files_only else 'HF_HUB_OFFLINE is set'}). {how}"
        )
    return _download(repo_id, cache, how)


def cached_snapshot(repo_id: str) -> Path | None:
    """The complete snapshot of hub model ``repo_id`` in the local HF cache, or None; never goes online."""
    folder = _snapshot_in_cache(repo_id)
    return folder if folder is not None and _complete(folder) else None


def _snapshot_in_cache(repo_id: str) -> Path | None:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, cache_dir=hub_cache_dir(), local_files_only=True))
    except Exception:  # huggingface_hub raises several types for "not cached"
        return None


def _complete(folder: Path) -> bool:
    """Whether a cached snapshot holds a model marker and every shard its weights index lists."""
    if not any((folder / marker).is_file() for marker in _MARKERS):
        return False
    for index in folder.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not all((folder / shard).is_file() for shard in shards):
            return False
    return True


def _download(repo_id: str, cache: Path, how: str) -> Path:
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        info = HfApi().model_info(repo_id, files_metadata=True)
        files = {s.rfilename: s.size or 0 for s in info.siblings or []}
        skipped = _ALWAYS_SKIPPED + (["*.bin"] if any(f.endswith(".safetensors") for f in files) else [])
        size = sum(n for f, n in files.items() if not any(fnmatch(f, pattern) for pattern in skipped))
        logger.warning("downloading %s (%.1f GB) into %s; an interrupted download resumes", repo_id, size / 1e9, cache)
        folder = snapshot_download(repo_id, cache_dir=cache, ignore_patterns=skipped)
    except GatedRepoError as exc:
        raise MissingModelError(
            f"Model {repo_id!r} is gated: accept its terms at https://huggingface.co/{repo_id} and log in "
            f"(`hf auth login`), then run again. {how}"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise MissingModelError(
            f"Model {repo_id!r} is not a local folder and not found on the Hugging Face Hub (a private "
            "model needs `hf auth login`)."
        ) from exc
    except Exception as exc:  # no connection, timeouts, disk full: what huggingface_hub says, and the way out
        raise MissingModelError(f"Could not download {repo_id!r}: {exc}. {how}") from exc
    return Path(folder)
