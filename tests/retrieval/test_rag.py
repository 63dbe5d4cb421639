from __future__ import annotations

import copy

import pytest
import torch

from genembed.backbone.attention import run_decoder
from genembed.generation.decoding import decode_stream
from genembed.retrieval.context import Context, fresh_input, mode_layout, tail_ids
from genembed.retrieval.embed_kv import EmbedConfig
from genembed.retrieval.index_build import build_index
from genembed.retrieval.kv_ops import build_cache, cache_layers, encode_segment
from genembed.retrieval.rag import ask, build_context, retrieve

QUESTION = "What is the capital of France?"
CACHED_MODES = ("query", "doc", "querydoc", "docquery")


def _index(model, docs_file, tmp_path, method, **kwargs):
    config = EmbedConfig(method=method, steps=3, max_length=64)
    kwargs = {"store_kv": True, "kv_dtype": "float32", **kwargs}
    return build_index(
        model,
        [docs_file],
        tmp_path / method,
        config=config,
        chunk_tokens=12,
        overlap=3,
        show_progress_bar=False,
        **kwargs,
    )


def _greedy(model, context: Context, n: int = 16) -> tuple[list[int], torch.Tensor]:
    """Greedy ids (no EOS stop) and the first step's next-token logits."""
    lm = model.backbone.model
    ids, mask, positions = fresh_input(context, "cpu")
    head = lm.get_output_embeddings()
    with torch.no_grad():
        first = head(
            run_decoder(
                lm,
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                cache=_copy(context.cache),
                use_cache=True,
            ).last_hidden_state[:, -1]
        )
    return list(
        decode_stream(lm, ids, cache=context.cache, attention_mask=mask, position_ids=positions, max_new_tokens=n)
    ), first


def _copy(cache):
    return None if cache is None else copy.deepcopy(cache)


def _reference(model, index, query, sources, mode) -> Context:
    """The same prompt with every cached segment re-encoded alone, under the index's attention, at its place."""
    order, query_cached, docs_cached = mode_layout(mode)
    tok, lm = model.backbone.tokenizer, model.backbone.model
    doc_ids = index.config.prompt_ids(tok, [index.text(s.row) for s in sources], "doc")
    segments = [("query", query.ids[0], query_cached)] + [
        (s.id, i, docs_cached) for s, i in zip(sources, doc_ids, strict=True)
    ]
    if order == "doc_first":
        segments = segments[1:] + segments[:1]
    states, fresh, offset = [], [], 0
    for _, ids, cached in segments:
        if cached:
            states.append(encode_segment(lm, ids, attention=index.config.segment_attention, offset=offset))
        else:
            fresh.extend(ids)
        offset += len(ids)
    cached_tokens = sum(k.shape[2] for k, _ in states)
    return Context(build_cache(states) if states else None, fresh + tail_ids(tok), cached_tokens, [])


@pytest.mark.parametrize("method", ["grit", "mean"])
@pytest.mark.parametrize("mode", CACHED_MODES)
def test_cached_generation_equals_reencoding_under_the_same_attention(tiny_model, docs_file, tmp_path, method, mode):
    index = _index(tiny_model, docs_file, tmp_path, method)
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3, keep_query_kv=True)
    assert len(sources) == 3  # several passages, each placed after the previous one
    cached = build_context(tiny_model, index, query, sources, mode=mode)
    reference = _reference(tiny_model, index, query, sources, mode)
    assert cached.fresh_ids == reference.fresh_ids and cached.cached_tokens == reference.cached_tokens > 0
    for (k, v), (rk, rv) in zip(cache_layers(cached.cache), cache_layers(reference.cache), strict=True):
        torch.testing.assert_close(k, rk, atol=2e-5, rtol=1e-4)  # keys rotated to their place
        torch.testing.assert_close(v, rv, atol=2e-5, rtol=1e-4)
    tokens, logits = _greedy(tiny_model, cached)
    ref_tokens, ref_logits = _greedy(tiny_model, reference)
    assert tokens == ref_tokens
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("method", ["mean", "gircse"])
def test_with_a_causal_method_the_first_cached_segment_is_exact(tiny_model, docs_file, tmp_path, method):
    """Cached states of the segment at position 0 equal a full causal pass: doc caching with one
    passage and query caching give exactly what plain RAG with the same order gives."""
    index = _index(tiny_model, docs_file, tmp_path, method)
    for mode, top_k in (("doc", 1), ("query", 3)):
        query, sources = retrieve(tiny_model, index, QUESTION, top_k=top_k, keep_query_kv=True)
        order = mode_layout(mode)[0]
        cached = build_context(tiny_model, index, query, sources, mode=mode)
        plain = build_context(tiny_model, index, query, sources, mode="none", order=order)
        assert plain.cached_tokens == 0 and len(plain.fresh_ids) == cached.total_tokens
        tokens, logits = _greedy(tiny_model, cached)
        plain_tokens, plain_logits = _greedy(tiny_model, plain)
        assert tokens == plain_tokens
        torch.testing.assert_close(logits, plain_logits, atol=1e-4, rtol=1e-4)


def test_bidirectional_or_later_cached_segments_are_not_plain_rag(tiny_model, docs_file, tmp_path):
    """What caching costs: bidirectional states, and passages that never saw the ones before them."""
    for method, mode, top_k in (("grit", "doc", 1), ("mean", "doc", 3)):
        index = _index(tiny_model, docs_file, tmp_path, method, overwrite=True)
        query, sources = retrieve(tiny_model, index, QUESTION, top_k=top_k)
        cached = build_context(tiny_model, index, query, sources, mode=mode)
        plain = build_context(tiny_model, index, query, sources, mode="none", order="doc_first")
        assert (_greedy(tiny_model, cached, 1)[1] - _greedy(tiny_model, plain, 1)[1]).abs().max() > 2e-4  # noise: ~1e-6


def test_fp16_stored_states_generate_close_to_float32(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean", kv_dtype="float16")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3)
    assert index.kv(sources[0].row)[0].dtype == torch.float16
    half = build_context(tiny_model, index, query, sources, mode="doc")
    reference = _reference(tiny_model, index, query, sources, "doc")
    torch.testing.assert_close(_greedy(tiny_model, half, 1)[1], _greedy(tiny_model, reference, 1)[1], atol=5e-3, rtol=0)


def test_ask_returns_answer_sources_and_timings(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    pieces: list[str] = []
    answer = ask(tiny_model, index, QUESTION, cache="docquery", top_k=2, max_new_tokens=5, on_text=pieces.append)
    assert answer.mode == "docquery" and answer.order == "doc_first" and len(answer.sources) == 2
    _, sources = retrieve(tiny_model, index, QUESTION, top_k=2)
    assert [s.row for s in answer.sources] == [s.row for s in sources]
    assert answer.sources[0].score >= answer.sources[1].score
    assert answer.new_tokens <= 5 and answer.text == "".join(pieces).strip()
    assert 0 < answer.cached_tokens < answer.prompt_tokens
    assert {"embed_query", "search", "total"} <= answer.timings.keys()
    plain = ask(tiny_model, index, QUESTION, cache="none", top_k=2, max_new_tokens=5)
    assert plain.cached_tokens == 0 and plain.prompt_tokens == answer.prompt_tokens


def test_ask_with_rerank_reorders_the_candidates(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    answer = ask(tiny_model, index, QUESTION, cache="doc", top_k=2, rerank=True, rerank_candidates=5, max_new_tokens=2)
    scores = [s.rerank_score for s in answer.sources]
    assert None not in scores and scores == sorted(scores, reverse=True)
    expected = tiny_model.rerank(
        QUESTION, [index.text(s.row) for s in retrieve(tiny_model, index, QUESTION, top_k=5)[1]]
    )
    assert scores[0] == pytest.approx(expected[0].score, abs=1e-5)


def test_the_tail_is_a_user_turn_without_a_system_prompt(tiny):
    expected = "\n<|im_start|>user\nAnswer the question above using the passages.<|im_end|>\n<|im_start|>assistant\n"
    assert tiny.tokenizer.decode(tail_ids(tiny.tokenizer)) == expected
    assert mode_layout("none") == ("query_first", False, False)


def test_mode_errors(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean", store_kv=False)
    with pytest.raises(ValueError, match="stores no KV states: rebuild it with --store-kv"):
        ask(tiny_model, index, QUESTION, cache="doc")
    with pytest.raises(ValueError, match="cache mode must be one of"):
        ask(tiny_model, index, QUESTION, cache="passage")
    with pytest.raises(ValueError, match="puts the doc first"):
        ask(tiny_model, index, QUESTION, cache="doc", order="query_first")
    tiny_model.adapter, tiny_model.generation_adapter = "embedding-only", False
    index = _index(tiny_model, docs_file, tmp_path, "mean", overwrite=True, store_kv=False)
    with pytest.raises(ValueError, match=r"same weights for embedding and generation.*--adapter none"):
        ask(tiny_model, index, QUESTION, cache="query")
    assert ask(tiny_model, index, QUESTION, cache="none", max_new_tokens=1).cached_tokens == 0
    with pytest.raises(ValueError, match="embedding-only adapter.*or build without stored KV states"):
        _index(tiny_model, docs_file, tmp_path, "mean", store_kv=True, overwrite=True)
    tiny_model.generation_adapter = True  # a GRIT jointly trained adapter: both modes share the weights
    assert ask(tiny_model, index, QUESTION, cache="query", max_new_tokens=1).cached_tokens > 0
