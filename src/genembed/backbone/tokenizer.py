"""Load a model folder's tokenizer so that it splits text exactly as the folder's ``tokenizer.json`` says.

Under transformers 5, ``AutoTokenizer`` builds some model-specific tokenizer classes from the vocabulary
and merges with the class's own normalizer and pre-tokenizer instead of the saved ones: a Qwen2 folder
gets ``Qwen2Tokenizer``'s split regex even when its ``tokenizer.json`` holds another (the tiny GIRCSE
reference models carry SmolLM2's tokenizer, whose byte-level split keeps ``"\\n\\n"`` as two tokens where
Qwen2's regex makes one). The reference implementations tokenize with the saved file, so we keep
``AutoTokenizer``'s class (special tokens, chat template, padding) and put the saved normalizer and
pre-tokenizer back where they differ. For a folder whose file agrees with its class (a real Qwen2.5) nothing
changes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

__all__ = ["load_tokenizer"]

logger = logging.getLogger(__name__)

_PARTS = ("normalizer", "pre_tokenizer")


def load_tokenizer(folder: str | Path, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(folder)``, with the normalizer and pre-tokenizer of the folder's
    ``tokenizer.json`` when the class replaced them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), **kwargs)
    saved_file = Path(folder) / "tokenizer.json"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not saved_file.is_file():
        return tokenizer
    from tokenizers import Tokenizer

    saved = Tokenizer.from_file(str(saved_file))
    for part in _PARTS:
        want, have = getattr(saved, part), getattr(backend, part)
        if _state(want) != _state(have):
            logger.info("%s: using the %s of %s, not %s's own", folder, part, saved_file.name, type(tokenizer).__name__)
            setattr(backend, part, want)
    return tokenizer


def _state(component: Any) -> Any:
    return None if component is None else json.loads(component.__getstate__())
