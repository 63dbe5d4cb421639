"""peft calls made without the noise it adds under transformers 5."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

__all__ = ["quiet_peft"]


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """Silence the FutureWarning peft triggers on every adapter load or wrap by probing transformers'
    ``is_gradient_checkpointing``, deprecated in v5 (nothing a user can act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield
