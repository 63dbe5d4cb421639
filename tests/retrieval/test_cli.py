from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from genembed.cli.app import app
from genembed.retrieval.faiss_store import FaissStore

runner = CliRunner()


def _build(model_dir, sources, out, *extra):
    args = ["index", "build", *map(str, sources), "--out", str(out), "--model", str(model_dir)]
    return runner.invoke(app, [*args, "--chunk-tokens", "12", "--overlap", "3", "--method", "mean", *extra])


def test_build_add_info_and_ask(model_dir, docs_file, more_file, tmp_path):
    out = tmp_path / "idx"
    result = _build(model_dir, [docs_file], out, "--store-kv", "--kv-dtype", "bf16")
    assert result.exit_code == 0, result.output
    assert "bfloat16, 2 layers x 2 KV heads x 8" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["ref"]["model"] == str(model_dir.resolve())
    n_chunks = manifest["n_chunks"]

    result = runner.invoke(app, ["index", "add", str(out), str(more_file)])  # the model comes from the manifest
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["n_chunks"] > n_chunks

    result = runner.invoke(app, ["index", "info", str(out)])
    assert result.exit_code == 0 and "mean, causal attention" in result.output

    result = runner.invoke(app, ["ask", str(out), "capital of France?", "--kv-cache", "doc", "--top", "2"])
    assert result.exit_code == 0, result.output
    assert "sources" in result.output and "cache=doc (doc_first)" in result.output
    listed = re.findall(r"│ [12] │ (\w+#\d+) ", result.output)  # the sources' chunk ids
    assert len(listed) == 2 and set(listed) <= {c.id for c in FaissStore.load(out).chunks}
    assert "(0 recomputed)" in result.output
    assert "note: --kv-cache doc (doc_first) reuses states computed apart" in result.stderr  # lossy: says so
    args = ["ask", str(out), "capital of France?", "--kv-cache", "doc", "--top", "2", "--recompute", "1"]
    result = runner.invoke(app, args)  # every token of the second passage
    recomputed = re.search(r"\((\d+) recomputed\)", result.output)
    assert result.exit_code == 0 and recomputed and int(recomputed.group(1)) > 0, result.output
    assert "reuses states computed apart" not in result.stderr  # everything recomputed: plain RAG's states

    # --rerank-top N reranks without --rerank, as in eval; the old --cache still parses, with a note
    args = ["ask", str(out), "capital of France?", "--cache", "query", "--top", "1", "--max-new-tokens", "2"]
    plain = runner.invoke(app, args)
    assert plain.exit_code == 0 and "rerank" not in plain.stdout, plain.output
    assert "note: --cache is an old spelling of --kv-cache" in plain.stderr
    reranked = runner.invoke(app, [*args, "--rerank-top", "3"])
    assert reranked.exit_code == 0, reranked.output
    assert re.search(r"rerank \d+\.\d\ds", reranked.stdout)  # the rerank step's time: it ran


def test_cli_errors_are_clean(model_dir, docs_file, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "ok"}\n{"id": 2}\n')
    result = _build(model_dir, [bad], tmp_path / "idx")
    assert result.exit_code == 2 and "bad.jsonl:2: missing field 'text'" in result.output

    assert _build(model_dir, [docs_file], tmp_path / "plain").exit_code == 0
    result = runner.invoke(app, ["ask", str(tmp_path / "plain"), "q?", "--kv-cache", "querydoc"])
    assert result.exit_code == 2 and "needs stored KV states: rebuild" in result.output

    result = runner.invoke(app, ["ask", str(tmp_path), "q?"])
    assert result.exit_code == 2 and "not a genembed index" in result.output
    result = runner.invoke(app, ["ask", str(tmp_path / "plain"), "q?", "--kv-cache", "everything"])
    assert result.exit_code == 2 and "cache mode must be one of" in result.output
    result = runner.invoke(app, ["ask", str(tmp_path / "plain"), "q?", "--recompute", "1.5"])
    assert result.exit_code == 2 and "--recompute" in result.output
    result = _build(model_dir, [docs_file], tmp_path / "x", "--overlap", "12")
    assert result.exit_code == 2 and "--overlap (12) must be smaller" in result.output
    assert "Traceback" not in result.output


def test_a_generation_adapter_is_kept_with_the_index(model_dir, tiny, docs_file, tmp_path):
    """`index build --generator` records the generator; `ask` loads it again, and refuses other weights."""
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(5)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["k_proj", "down_proj"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(tiny.model), config).save_pretrained(tmp_path / "rag-lora")
    out = tmp_path / "idx"
    result = _build(model_dir, [docs_file], out, "--store-kv", "--generator", str(tmp_path / "rag-lora"))
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["ref"]["generator"] == str((tmp_path / "rag-lora").resolve())
    assert manifest["kv"]["source"]["adapter"].startswith("rag-lora@sha256:")
    result = runner.invoke(app, ["ask", str(out), "capital of France?", "--kv-cache", "doc", "--max-new-tokens", "3"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["ask", str(out), "capital of France?", "--kv-cache", "doc", "--generator", "base"])
    assert result.exit_code == 2 and "stores KV states of tiny-model + adapter rag-lora@sha256:" in " ".join(
        result.output.split()
    )


def test_ask_refuses_kv_states_of_other_weights(model_dir, docs_file, tmp_path):
    out = tmp_path / "idx"
    assert _build(model_dir, [docs_file], out, "--store-kv").exit_code == 0
    result = runner.invoke(app, ["index", "info", str(out)])
    assert re.search(r"KV made by +│ tiny-model, adapter none, causal attention, generation pass", result.output)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["kv"]["source"]["adapter"] = "grit-joint@sha256:0123456789abcdef"  # states of other weights
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["ask", str(out), "capital of France?", "--kv-cache", "doc"])
    assert result.exit_code == 2, result.output
    expected = (
        "stores KV states of tiny-model + adapter grit-joint@sha256:0123456789abcdef, causal attention, but the "
        "loaded model generates with tiny-model, causal attention. Rebuild it with"
    )
    assert expected in " ".join(result.output.split())
    args = ["ask", str(out), "capital of France?", "--kv-cache", "query", "--no-repeat-ngram", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "cache=query (doc_first)" in result.output  # needs no stored states
