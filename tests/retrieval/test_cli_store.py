"""`genembed index build/add/info/import/delete` and `genembed ask` with a Milvus store or a faiss factory."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from genembed.cli.app import app
from genembed.retrieval.stores import open_index

from .conftest import DOCS, write_jsonl

runner = CliRunner()
SMALL = ["--chunk-tokens", "12", "--overlap", "3", "--method", "mean"]


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_milvus_build_info_ask_add_delete(model_dir, docs_file, more_file, tmp_path):
    where = f"milvus:{tmp_path}/idx.db"
    result = _run("index", "build", docs_file, "--out", where, "--model", model_dir, *SMALL, "--store-kv")
    assert result.exit_code == 0, result.output
    assert "Milvus AUTOINDEX, inner product" in result.output and f"{tmp_path}/idx.kv" in result.output
    n = len(open_index(where))

    result = _run("ask", where, "capital of France?", "--kv-cache", "doc", "--top", "2", "--filter", 'doc_id == "fox"')
    assert result.exit_code == 0, result.output
    assert re.findall(r"│ [12] │ (fox#\d+) ", result.output) and "cache=doc (doc_first)" in result.output

    result = _run("index", "add", where, more_file)  # the model comes from the collection's manifest
    assert result.exit_code == 0, result.output
    assert len(open_index(where)) > n

    n_fox = len(open_index(where).query('doc_id == "fox"'))
    result = _run("index", "delete", where, "--doc", "fox")
    assert result.exit_code == 0 and f"deleted {n_fox} chunks" in result.output

    result = _run("index", "info", where)
    assert result.exit_code == 0 and "mean, causal attention" in result.output and "float16 in" in result.output

    result = _run("ask", where, "q?", "--filter", "doc_id ==== 1")
    assert result.exit_code == 2 and "Milvus refused the search with filter" in result.output


def test_import_encoded_shards_and_faiss_factories(model_dir, tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", DOCS)
    args = ["--model", model_dir, "--method", "mean", "--max-length", "64", "--shard-size", "2", "-q"]
    result = _run("encode", corpus, "--out", tmp_path / "emb", *args)
    assert result.exit_code == 0, result.output
    cases = [(tmp_path / "faiss", "faiss HNSW16, inner product (efSearch=32)"), (tmp_path / "x.db", "Milvus")]
    for out, shown in cases:
        result = _run(
            "index", "import", tmp_path / "emb", "--corpus", corpus, "--out", out, "--model", model_dir,
            *(["--index-type", "HNSW16", "--search-param", "efSearch=32"] if "faiss" in str(out) else []),
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert shown in result.output and "imported from" in result.output
        result = _run("ask", out, "capital of France?", "--top", "1", "--max-new-tokens", "2")
        assert result.exit_code == 0 and re.findall(r"│ 1 │ (\w+#0) ", result.output), result.output


def test_store_errors_are_clean(model_dir, docs_file, tmp_path):
    result = _run("index", "build", docs_file, "--out", "ftp://host/idx", "--model", model_dir)
    assert result.exit_code == 2 and "unsupported scheme 'ftp'" in result.output
    result = _run("index", "info", "http://127.0.0.1:9")
    assert result.exit_code == 2 and "cannot connect to Milvus at http://127.0.0.1:9" in result.output
    build = ["index", "build", docs_file, "--out", tmp_path / "f", "--model", model_dir, *SMALL]
    result = _run(*build, "--index-type", "X")
    assert result.exit_code == 2 and "faiss cannot build index 'X'" in result.output
    assert _run(*build).exit_code == 0
    result = _run("ask", tmp_path / "f", "q?", "--filter", 'doc_id == "fox"')
    assert result.exit_code == 2 and "cannot filter on metadata" in result.output
    result = _run("index", "delete", tmp_path / "f", "--doc", "fox")
    assert result.exit_code == 2 and "deleting needs a Milvus store" in result.output
    result = _run("ask", tmp_path / "f", "q?", "--search-param", "nprobe=3")
    assert result.exit_code == 2 and "no search parameter 'nprobe'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.integration
def test_build_and_ask_in_separate_processes(model_dir, docs_file, tmp_path):
    """What users do: one `genembed` process builds the milvus-lite database, a later one asks it."""
    where = f"milvus:{tmp_path}/idx.db"
    cli = [sys.executable, "-m", "genembed.cli.app"]
    build = [*cli, "index", "build", str(docs_file), "--out", where, "--model", str(model_dir), *SMALL]
    done = subprocess.run(build, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ask = [*cli, "ask", where, "capital of France?", "--top", "2", "--max-new-tokens", "2"]
    done = subprocess.run([*ask, "--filter", 'doc_id == "guitar"'], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.findall(r"│ [12] │ (guitar#\d+) ", done.stdout) and "Traceback" not in done.stderr
