"""RAG on the real default model (slow): KV reuse works on SmolLM2's RoPE (theta 100000, GQA 9/3)."""

from __future__ import annotations

import json

import pytest
import torch

from genembed.retrieval.embed_kv import EmbedConfig
from genembed.retrieval.index_build import build_index
from genembed.retrieval.kv_ops import cache_layers, encode_segment
from genembed.retrieval.rag import ask, build_context, retrieve

pytestmark = pytest.mark.slow

DOCS = [
    {"id": "photo", "title": "Photosynthesis", "text": "Plants make their food by photosynthesis: they turn sunlight, "
     "water and carbon dioxide into sugar and oxygen in their leaves."},
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": "card", "title": "Banking", "text": "If you lose your debit card, call your bank at once to block it."},
]  # fmt: skip


@pytest.fixture(scope="module")
def real_index(real_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rag")
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    config = EmbedConfig(method="mean", max_length=128)
    return build_index(
        real_model, [folder / "docs.jsonl"], folder / "idx", config=config, store_kv=True, show_progress_bar=False
    )


def test_doc_caching_matches_plain_rag_and_answers(real_model, real_index):
    question = "How do plants make their food?"
    plain = ask(real_model, real_index, question, cache="none", order="doc_first", top_k=1, max_new_tokens=24)
    cached = ask(real_model, real_index, question, cache="doc", top_k=1, max_new_tokens=24)
    assert plain.sources[0].doc_id == "photo"
    assert any(word in plain.text.lower() for word in ("photosynthesis", "sunlight")), plain.text
    # causal method, one passage at position 0, float16 storage: the same answer as re-encoding it
    assert cached.text == plain.text and cached.cached_tokens > 0


def test_cached_passages_are_placed_by_rotating_their_keys(real_model, real_index):
    query, sources = retrieve(real_model, real_index, "What is the capital of France?", top_k=3, keep_query_kv=True)
    context = build_context(real_model, real_index, query, sources, mode="querydoc")
    lm = real_model.backbone.model
    _, start, stop, cached = context.layout[2]  # the second passage, after the query and the first passage
    assert cached and start > 0
    ids = real_index.config.prompt_ids(real_model.backbone.tokenizer, [real_index.text(sources[1].row)], "doc")[0]
    keys, values = encode_segment(lm, ids, attention="causal", offset=start)
    layer_keys = torch.stack([k[0, :, start:stop] for k, _ in cache_layers(context.cache)])
    layer_values = torch.stack([v[0, :, start:stop] for _, v in cache_layers(context.cache)])
    torch.testing.assert_close(layer_keys, keys, atol=0.05, rtol=0.01)  # float16 storage
    torch.testing.assert_close(layer_values, values, atol=0.05, rtol=0.01)
