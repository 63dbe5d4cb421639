"""GRIT's RAG caching on a tiny GritLM-format model: an index built with the embedding passes' KV states,
and answers in the four caching modes (and without caching) equal to GritLM's README loop written out
with transformers (``model.generate(..., past_key_values=cache)`` after the cached embedding passes)."""

from __future__ import annotations

import pytest
import torch

from genembed.encoders.settings import EmbedSettings, IndexEmbedSettings
from genembed.retrieval.grit_cache import grit_kv_source
from genembed.retrieval.index_build import build_index
from genembed.retrieval.kv_ops import build_cache, stacked_states
from genembed.retrieval.rag import ask

QUESTION = "What is the capital of France?"
NEW_TOKENS = 12
OPTIONAL = "Optionally using the prior context answer the query prior to it"
ANSWER = "Answer the prior query while optionally using the context prior to it"


@pytest.fixture(scope="module")
def grit_index(grit_model, tmp_path_factory):
    from .conftest import DOCS, write_jsonl

    model = grit_model("mistral")
    folder = tmp_path_factory.mktemp("grit-index")
    docs = write_jsonl(folder / "docs.jsonl", DOCS)
    embed = EmbedSettings(method="grit", prompt_format="gritlm", max_length=128)
    config = IndexEmbedSettings(embed=embed, query_instruction="")
    index = build_index(
        model, [docs], folder / "index", settings=config, store_kv=True, kv_dtype="float32", show_progress_bar=False
    )
    return model, index


def _embedding_pass(lm, ids):
    """GritLM's embedding pass (``is_causal=False``) over ``ids``: its KV states."""
    with torch.no_grad():
        out = lm.model(input_ids=torch.tensor([ids]), is_causal=False, use_cache=True)
    return stacked_states(out.past_key_values if hasattr(out, "past_key_values") else out.cache, 0, 0, len(ids))


def _reference_answer(model, mode: str, passage: str) -> str:
    """GritLM's README: cache the embedding passes, tokenize the format without special tokens, generate."""
    tok, lm = model.backbone.tokenizer, model.backbone.model
    query = tok("<|embed|>\n" + QUESTION)["input_ids"]
    doc = tok("<|embed|>\n" + passage)["input_ids"]
    if mode == "none":
        prompt = tok(f"<|user|>\n{QUESTION}\n\n{passage}\n\n{OPTIONAL}\n<|assistant|>\n")["input_ids"]
        out = lm.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)
        return tok.decode(out[0, len(prompt) :], skip_special_tokens=True).strip()
    states = {
        "query": [query],
        "doc": [doc],
        "querydoc": [query, tok("\n<|embed|>\n" + passage, add_special_tokens=False)["input_ids"]],
        "docquery": [doc, query],
    }[mode]
    tails = {
        "query": f"\n<|user|>\n{passage}\n\n{OPTIONAL}\n<|assistant|>\n",
        "doc": f"\n<|user|>\n{QUESTION}\n\n{ANSWER}\n<|assistant|>\n",
        "querydoc": f"\n<|user|>\n{OPTIONAL}\n<|assistant|>\n",
        "docquery": f"\n<|user|>\n{ANSWER}\n<|assistant|>\n",
    }
    cache = build_cache([_embedding_pass(lm, ids) for ids in states])
    past = sum(len(ids) for ids in states)
    tail = tok(tails[mode], add_special_tokens=False)["input_ids"]
    mask = torch.ones((1, past + len(tail)), dtype=torch.long)
    out = lm.generate(
        torch.tensor([tail]), attention_mask=mask, cache=cache, max_new_tokens=NEW_TOKENS, do_sample=False
    )
    return tok.decode(out[0, len(tail) :], skip_special_tokens=True).strip()


def test_the_index_stores_the_embedding_passes(grit_index):
    model, index = grit_index
    assert index.kv_source == grit_kv_source(model)
    text = index.text(0)
    keys, values = index.kv(0)
    want_keys, want_values = _embedding_pass(
        model.backbone.model, model.backbone.tokenizer("<|embed|>\n" + text)["input_ids"]
    )
    torch.testing.assert_close(torch.as_tensor(keys), want_keys, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.as_tensor(values), want_values, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["none", "query", "doc", "querydoc", "docquery"])
def test_answers_equal_gritlm_caching(grit_index, mode):
    model, index = grit_index
    answer = ask(model, index, QUESTION, cache=mode, top_k=1, max_new_tokens=NEW_TOKENS, no_repeat_ngram_size=0)
    assert answer.text == _reference_answer(model, mode, index.text(answer.sources[0].row))
    assert answer.text and answer.new_tokens > 2
    assert answer.cached_tokens > 0 if mode != "none" else answer.cached_tokens == 0


def test_cli_builds_a_grit_index_and_encodes_in_gritlm_format(grit_folders, grit_model, tmp_path):
    import json

    import numpy as np
    from typer.testing import CliRunner

    from genembed.cli.app import app

    from .conftest import DOCS, write_jsonl

    docs = write_jsonl(tmp_path / "docs.jsonl", DOCS)
    common = ["--model", str(grit_folders["mistral"]), "--dtype", "float32", "--method", "grit"]
    common += ["--prompt-format", "gritlm"]
    built = CliRunner().invoke(
        app, ["index", "build", str(docs), "--out", str(tmp_path / "idx"), "--store-kv", *common]
    )
    assert built.exit_code == 0, built.output
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["embed"]["prompt_format"] == "gritlm" and manifest["kv"]["source"]["format"] == "gritlm"
    encoded = CliRunner().invoke(app, ["encode", str(docs), "--out", str(tmp_path / "emb"), "--quiet", *common])
    assert encoded.exit_code == 0, encoded.output
    got = np.concatenate([np.load(f) for f in sorted((tmp_path / "emb").glob("shard-*.npy"))])
    texts = [f"{d['title']} {d['text']}" if d["title"] else d["text"] for d in DOCS]
    np.testing.assert_allclose(got, grit_model("mistral").encode(texts), atol=1e-5)


def test_grit_caching_needs_a_faiss_folder(grit_index, tmp_path):
    from .conftest import DOCS, write_jsonl

    model, _ = grit_index
    config = EmbedSettings(method="grit", prompt_format="gritlm")
    docs = write_jsonl(tmp_path / "docs.jsonl", DOCS)
    with pytest.raises(ValueError, match="needs a faiss folder"):
        build_index(
            model, [docs], f"milvus:{tmp_path / 'x.db'}", settings=config, store_kv=True, show_progress_bar=False
        )
