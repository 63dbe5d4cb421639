"""The README's LangChain ``OpenAIEmbeddings`` example runs as written against a real server, offline
(no tiktoken file anywhere), and its settings carry more texts than one request may hold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("langchain_openai")

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = next(
    b for b in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S) if "OpenAIEmbeddings" in b
)


def test_the_readme_example_runs_offline_with_its_settings(served, tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))  # a tiktoken lookup would need the network
    code = BLOCK.replace("http://127.0.0.1:8000", served.url)
    assert code != BLOCK
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    reference = served.reference
    np.testing.assert_allclose(namespace["vectors"], reference.encode(["a text", "another"]), atol=1e-5)
    np.testing.assert_allclose(namespace["question"], reference.encode_query("a question?"), atol=1e-5)
    # more texts than the server takes in one request (--max-inputs, 256) go in several requests
    texts = [f"text number {i}" for i in range(served.state.settings.max_inputs + 20)]
    vectors = namespace["documents"].embed_documents(texts)
    np.testing.assert_allclose(vectors[-3:], reference.encode(texts[-3:]), atol=1e-5)
