"""Every Python block of docs/integrations.md runs as written, on the bundled default model."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

import genembed

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no network calls from the Haystack example

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
RAG = [block for block in BLOCKS if "integrations." in block]


def test_the_page_has_one_example_per_framework():
    assert len(BLOCKS) == 4
    assert [re.search(r"genembed\.integrations\.(\w+)", block).group(1) for block in RAG] == [
        "langchain",
        "llama_index",
        "haystack",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_docs_example_runs(block, default_model, monkeypatch):
    monkeypatch.setattr(genembed, "load", lambda *args, **kwargs: default_model)  # one load for every block
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(BLOCKS[block], f"{DOC.name} block {block}", "exec"), namespace)
    print(printed.getvalue())  # shown with pytest -s: the outputs quoted in the docs
    if BLOCKS[block] in RAG:
        assert namespace["context"].startswith("Photosynthesis")  # retrieval found the relevant text
        assert isinstance(namespace["answer"], str) and namespace["answer"].strip()
    default_model.to("cpu")
