"""Which torch device to run on: ``"auto"`` picks CUDA, then Apple MPS, then the CPU."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["resolve_device"]


def resolve_device(device: Any = "auto") -> str:
    """A torch device string for ``device``.

    Args:
        device: ``"auto"`` (or None): ``cuda:LOCAL_RANK`` (``cuda:0`` outside a multi-process launcher)
            when CUDA is available, else ``mps`` when Apple's Metal backend is, else ``cpu``. Anything
            else (``"cpu"``, ``"cuda:1"``, a ``torch.device``) is checked and returned as a string.

    Raises:
        ValueError: not a device torch knows.
    """
    import torch

    if device is None or device == "auto":
        if torch.cuda.is_available():
            return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'auto' or a torch device such as 'cpu' or 'cuda:0', got {device!r}") from exc
