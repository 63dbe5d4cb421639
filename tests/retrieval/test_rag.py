from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from genembed.backbone.attention import run_decoder
from genembed.encoders.settings import EmbedSettings
from genembed.generation.adapters import GENERATION_ADAPTER, adapter_mode, attach_generation_adapter
from genembed.generation.decoding import decode_stream
from genembed.generation.rag_prompt import RagPrompt
from genembed.model import GenerativeEmbedder
from genembed.models.trained_for import TrainedFor
from genembed.retrieval import index_build, rag
from genembed.retrieval.context import Context, Segment, assemble, fresh_input, mode_layout
from genembed.retrieval.faiss_store import MANIFEST, FaissStore
from genembed.retrieval.index_build import add_to_index, build_index
from genembed.retrieval.kv_ops import cache_layers, encode_segment
from genembed.retrieval.kv_segment import segment_states
from genembed.retrieval.kv_source import KVSourceError
from genembed.retrieval.rag import ask, build_context, retrieve

QUESTION = "What is the capital of France?"
CACHED_MODES = ("query", "doc", "querydoc", "docquery")
# the query first with query caching (GRIT's layout) and the passages first with doc caching: the
# first segment after the head is cached in each
FIRST_CACHED = [("doc", None), ("query", "query_first"), ("querydoc", None), ("docquery", None)]


def _index(model, docs_file, tmp_path, method, **kwargs):
    config = EmbedSettings(method=method, steps=3, max_length=64)
    kwargs = {"store_kv": True, "kv_dtype": "float32", **kwargs}
    return build_index(
        model,
        [docs_file],
        tmp_path / method,
        settings=config,
        chunk_tokens=12,
        overlap=3,
        show_progress_bar=False,
        **kwargs,
    )


@pytest.fixture
def lora_model(_tiny_backbone):
    """The tiny model with an embedding-only LoRA adapter, like the shipped default: it embeds with the
    adapter and generates with the base weights."""
    from peft import LoraConfig, get_peft_model

    tiny = copy.deepcopy(_tiny_backbone)  # not the `tiny` that `tiny_model` wraps
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    tiny.model = get_peft_model(tiny.model, config).eval()
    model = GenerativeEmbedder(tiny, adapter="gircse-lora")
    model.trained_for = TrainedFor("gircse", "causal", False, "training_config.yaml")
    return model


@pytest.fixture
def generator_model(lora_model, _tiny_backbone, tmp_path):
    """``lora_model`` with a generation adapter beside its embedding adapter (other weights and modules)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(7)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["k_proj", "o_proj", "up_proj"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(_tiny_backbone.model), config).save_pretrained(tmp_path / "rag-lora")
    attach_generation_adapter(lora_model.backbone, tmp_path / "rag-lora")
    lora_model.generation_adapter_name, lora_model.generation_adapter_path = "rag-lora", str(tmp_path / "rag-lora")
    lora_model.generation_adapter = GENERATION_ADAPTER
    return lora_model


def _greedy(model, context: Context, n: int = 16) -> tuple[list[int], torch.Tensor]:
    """Greedy ids (no EOS stop) and the first step's next-token logits, with the generation weights."""
    lm = model.backbone.model
    ids, mask, positions = fresh_input(context, "cpu")
    head = lm.get_output_embeddings()
    with adapter_mode(lm, model.generation_adapter), torch.no_grad():
        hidden = run_decoder(
            lm, input_ids=ids, attention_mask=mask, position_ids=positions, cache=_copy(context.cache), use_cache=True
        ).last_hidden_state
        first = head(hidden[:, -1])
        tokens = decode_stream(
            lm, ids, cache=context.cache, attention_mask=mask, position_ids=positions, max_new_tokens=n
        )
        return list(tokens), first


def _copy(cache):
    return None if cache is None else copy.deepcopy(cache)


def _full_pass(model, context: Context) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) of one causal pass over an uncached context, with the generation weights."""
    assert context.cache is None
    lm = model.backbone.model
    ids = torch.tensor([context.fresh_ids])
    with adapter_mode(lm, model.generation_adapter):
        out = run_decoder(lm, input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    return cache_layers(out.cache)


@pytest.mark.parametrize("weights", ["tiny_model", "lora_model", "generator_model"])
@pytest.mark.parametrize(("mode", "order"), FIRST_CACHED)
def test_the_first_cached_segment_equals_a_full_causal_pass(request, docs_file, tmp_path, mode, order, weights):
    """The issue's check: the cached and the uncached prompt give equal states for the head and the
    first segment (1e-4, float32), also when the model embeds with an adapter it does not generate with
    (the base weights generate, or a generation adapter loaded beside it)."""
    model = request.getfixturevalue(weights)
    index = _index(model, docs_file, tmp_path, "gircse")
    query, sources = retrieve(model, index, QUESTION, top_k=3, keep_query_kv=True)
    context_order = mode_layout(mode, order)[0]
    cached = build_context(model, index, query, sources, mode=mode, order=order)
    plain = build_context(model, index, query, sources, mode="none", order=context_order)
    assert cached.total_tokens == plain.total_tokens and cached.fresh_ids == plain.fresh_ids[-len(cached.fresh_ids) :]
    (head, _, h, head_cached), (first, start, stop, first_cached) = cached.layout[:2]
    assert head == "head" and head_cached and first_cached and start == h > 0
    assert first == ("query" if context_order == "query_first" else sources[0].id)
    full = _full_pass(model, plain)
    for (k, v), (fk, fv) in zip(cache_layers(cached.cache), full, strict=True):
        torch.testing.assert_close(k[..., :stop, :], fk[..., :stop, :], atol=1e-4, rtol=0)
        torch.testing.assert_close(v[..., :stop, :], fv[..., :stop, :], atol=1e-4, rtol=0)


def _placed(model, index, query, sources, mode) -> Context:
    """The same prompt with each cached segment re-encoded after the head *at its place* (no key rotation)."""
    order, query_cached, docs_cached = mode_layout(mode)
    tok, lm = model.backbone.tokenizer, model.backbone.model
    prompt = index.rag_prompt
    head = prompt.head_ids(tok)
    doc_ids = prompt.passage_ids(tok, [index.text(s.row) for s in sources])
    passages = [(s.id, ids, docs_cached) for s, ids in zip(sources, doc_ids, strict=True)]
    question = ("query", prompt.query_ids(tok, query.text, order), query_cached)
    # the best passage first after the head, or last (next to the answer) with the question first
    segments = [*passages, question] if order == "doc_first" else [question, *passages[::-1]]
    head_kv = encode_segment(lm, head, attention="causal") if segments[0][2] else None  # before a cached one
    placed, offset = [Segment("head", head, head_kv)], len(head)
    for name, ids, cached in segments:
        kv = None
        if cached:
            keys, values = encode_segment(lm, head + ids, attention="causal", offset=offset - len(head))
            kv = (keys[:, :, len(head) :], values[:, :, len(head) :])
        placed.append(Segment(name, ids, kv, at=offset))
        offset += len(ids)
    return assemble(lm, placed, prompt.tail_ids(tok))


@pytest.mark.parametrize("method", ["grit", "mean"])
@pytest.mark.parametrize("mode", CACHED_MODES)
def test_cached_generation_equals_encoding_each_segment_at_its_place(tiny_model, docs_file, tmp_path, method, mode):
    index = _index(tiny_model, docs_file, tmp_path, method)
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3, keep_query_kv=True)
    assert len(sources) == 3  # several passages, each placed after the previous one
    cached = build_context(tiny_model, index, query, sources, mode=mode)
    reference = _placed(tiny_model, index, query, sources, mode)
    assert cached.fresh_ids == reference.fresh_ids and cached.cached_tokens == reference.cached_tokens > 0
    assert cached.layout == reference.layout
    for (k, v), (rk, rv) in zip(cache_layers(cached.cache), cache_layers(reference.cache), strict=True):
        torch.testing.assert_close(k, rk, atol=2e-5, rtol=1e-4)  # keys rotated to their place
        torch.testing.assert_close(v, rv, atol=2e-5, rtol=1e-4)
    tokens, logits = _greedy(tiny_model, cached)
    ref_tokens, ref_logits = _greedy(tiny_model, reference)
    assert tokens == ref_tokens
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("method", ["grit", "gircse"])
def test_doc_caching_with_one_passage_and_query_caching_give_plain_rag(tiny_model, docs_file, tmp_path, method):
    """Stored states are the generator's causal ones whatever the embedding method (even bidirectional
    grit): one cached passage, or a cached query placed first, answer exactly as plain RAG does."""
    index = _index(tiny_model, docs_file, tmp_path, method)
    for mode, order, top_k in (("doc", None, 1), ("query", "query_first", 3)):
        query, sources = retrieve(tiny_model, index, QUESTION, top_k=top_k, keep_query_kv=True)
        cached = build_context(tiny_model, index, query, sources, mode=mode, order=order)
        plain = build_context(tiny_model, index, query, sources, mode="none", order=mode_layout(mode, order)[0])
        assert plain.cached_tokens == 0 and len(plain.fresh_ids) == cached.total_tokens
        tokens, logits = _greedy(tiny_model, cached)
        plain_tokens, plain_logits = _greedy(tiny_model, plain)
        assert tokens == plain_tokens
        torch.testing.assert_close(logits, plain_logits, atol=1e-4, rtol=1e-4)


def test_later_cached_segments_are_not_plain_rag(tiny_model, docs_file, tmp_path):
    """What caching costs: passages that never saw the ones before them, a query that never saw the passages."""
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3, keep_query_kv=True)
    plain = build_context(tiny_model, index, query, sources, mode="none")
    for mode in ("doc", "query"):  # both doc_first: three isolated passages, or an isolated query last
        cached = build_context(tiny_model, index, query, sources, mode=mode)
        assert (_greedy(tiny_model, cached, 1)[1] - _greedy(tiny_model, plain, 1)[1]).abs().max() > 2e-4  # noise ~1e-6


def test_fp16_stored_states_generate_close_to_float32(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean", kv_dtype="float16")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3)
    assert index.kv(sources[0].row)[0].dtype == torch.float16
    half = build_context(tiny_model, index, query, sources, mode="doc")
    reference = _placed(tiny_model, index, query, sources, "doc")
    torch.testing.assert_close(_greedy(tiny_model, half, 1)[1], _greedy(tiny_model, reference, 1)[1], atol=5e-3, rtol=0)


def test_an_embedding_only_adapter_stores_the_base_weights_states(lora_model, docs_file, tmp_path):
    """The shipped default's case: --store-kv works; the states come from a second pass with the base
    weights (what it generates with), not from the adapter's embedding pass."""
    index = _index(lora_model, docs_file, tmp_path, "gircse")
    source = index.kv_source
    assert source["adapter"] == "none" and source["pass"] == "generation" and source["attention"] == "causal"
    tok = lora_model.backbone.tokenizer
    prompt = index.rag_prompt
    ids = prompt.passage_ids(tok, [index.text(2)])[0]
    _, (expected,) = segment_states(lora_model, prompt.head_ids(tok), [ids])
    lora_model.generation_adapter = True  # what a pass with the adapter would have stored
    _, (adapted,) = segment_states(lora_model, prompt.head_ids(tok), [ids])
    lora_model.generation_adapter = False
    stored = index.kv(2, tokens=len(ids))
    torch.testing.assert_close(stored[0], expected[0], atol=1e-5, rtol=1e-4)
    assert (stored[0] - adapted[0]).abs().max() > 1e-3
    for mode in CACHED_MODES:
        answer = ask(lora_model, index, QUESTION, cache=mode, top_k=2, max_new_tokens=3)
        assert answer.cached_tokens > 0 and answer.prompt_tokens > answer.cached_tokens


def test_a_generation_adapter_stores_its_own_states(generator_model, docs_file, tmp_path):
    """States come from a second pass with the generation adapter, are recorded under its name and digest,
    and are refused once the model generates with other weights."""
    index = _index(generator_model, docs_file, tmp_path, "gircse")
    source = index.kv_source
    assert source["adapter"].startswith("rag-lora@sha256:") and source["pass"] == "generation"
    tok = generator_model.backbone.tokenizer
    ids = index.rag_prompt.passage_ids(tok, [index.text(1)])[0]
    _, (expected,) = segment_states(generator_model, index.rag_prompt.head_ids(tok), [ids])
    generator_model.generation_adapter = False
    _, (base,) = segment_states(generator_model, index.rag_prompt.head_ids(tok), [ids])
    stored = index.kv(1, tokens=len(ids))
    torch.testing.assert_close(stored[0], expected[0], atol=1e-5, rtol=1e-4)
    assert (stored[0] - base[0]).abs().max() > 1e-3
    with pytest.raises(KVSourceError, match=r"stores KV states of tiny-llama-0 \+ adapter rag-lora@sha256:"):
        ask(generator_model, index, QUESTION, cache="doc", max_new_tokens=1)
    generator_model.generation_adapter = GENERATION_ADAPTER
    for mode in CACHED_MODES:
        answer = ask(generator_model, index, QUESTION, cache=mode, top_k=2, max_new_tokens=3)
        assert answer.cached_tokens > 0 and answer.prompt_tokens > answer.cached_tokens


def test_the_embedding_pass_is_reused_when_it_is_the_generators(tiny_model, docs_file, tmp_path, monkeypatch):
    """Same weights, causal attention and an embedding prompt that starts with the segment: no second pass."""
    plain = RagPrompt.matching_queries("Given a query, retrieve relevant passages.", "plain")
    plain = RagPrompt(**{**plain.to_dict(), "passage": "{text}"})  # the plain document prompt is the text alone
    calls: list[int] = []
    real = index_build.segment_states
    monkeypatch.setattr(index_build, "segment_states", lambda *a, **k: calls.append(1) or real(*a, **k))
    reused = _index(tiny_model, docs_file, tmp_path, "mean", prompt=plain)
    assert not calls and reused.kv_source["pass"] == "embedding"
    second = _index(tiny_model, docs_file, tmp_path, "grit", prompt=plain)  # bidirectional: a second pass
    assert calls and second.kv_source["pass"] == "generation"
    for row in range(len(reused)):
        torch.testing.assert_close(reused.kv(row)[0], second.kv(row)[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(reused.kv(row)[1], second.kv(row)[1], atol=1e-5, rtol=1e-4)
    # the query's states come from its embedding pass too
    monkeypatch.setattr(rag, "segment_states", lambda *a, **k: pytest.fail("the query was computed again"))
    query, sources = retrieve(tiny_model, reused, QUESTION, top_k=2, keep_query_kv=True)
    context = build_context(tiny_model, reused, query, sources, mode="docquery")
    assert context.cached_tokens == context.total_tokens - len(context.fresh_ids)


def test_gircse_query_states_are_reused_with_a_matching_prompt(tiny_model, docs_file, tmp_path, monkeypatch):
    """With RagPrompt.matching_queries the query segment starts GIRCSE's chat query prompt: query caching
    takes the head's and the query's states from the embedding pass, equal to computing them."""
    chat = RagPrompt.matching_queries("Given a query, retrieve relevant passages.", "chat")
    index = _index(tiny_model, docs_file, tmp_path, "gircse", prompt=chat)
    assert index.kv_source["pass"] == "generation"  # passages are plain text here, not GIRCSE's chat prompt
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=2, keep_query_kv=True)
    computed = build_context(tiny_model, index, dataclasses.replace(query, kv=None), sources, mode="docquery")
    monkeypatch.setattr(rag, "segment_states", lambda *a, **k: pytest.fail("the query was computed again"))
    reused = build_context(tiny_model, index, query, sources, mode="docquery")
    for (k, v), (rk, rv) in zip(cache_layers(reused.cache), cache_layers(computed.cache), strict=True):
        torch.testing.assert_close(k, rk, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(v, rv, atol=1e-5, rtol=1e-4)


def test_the_second_pass_runs_shard_by_shard(lora_model, docs_file, tmp_path, monkeypatch):
    sizes: list[int] = []
    real = index_build.segment_states
    monkeypatch.setattr(index_build, "segment_states", lambda m, h, s, **k: sizes.append(len(s)) or real(m, h, s, **k))
    index = _index(lora_model, docs_file, tmp_path, "gircse", shard_size=3)
    assert len(sizes) == -(-len(index) // 3) > 2 and max(sizes) == 3 and sum(sizes) == len(index)


def test_states_of_other_generation_weights_are_refused(tiny_model, docs_file, more_file, tmp_path):
    tiny_model.adapter = "embedding-only"  # generates with the base weights
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    assert index.kv_source["adapter"] == "none" and index.kv_source["backbone"] == "tiny-llama-0"
    tiny_model.generation_adapter = True  # now it generates with its adapter: the stored states are not its own
    for mode in ("doc", "querydoc", "docquery"):
        with pytest.raises(KVSourceError, match=r"stores KV states of tiny-llama-0, causal attention, but the loaded "
                           r"model generates with tiny-llama-0 \+ adapter embedding-only.*--store-kv"):  # fmt: skip
            ask(tiny_model, index, QUESTION, cache=mode, max_new_tokens=1)
    with pytest.raises(KVSourceError, match="stores KV states of"):
        add_to_index(tiny_model, index.path, [more_file], show_progress_bar=False)
    # cache modes that use no stored states still work
    assert ask(tiny_model, index, QUESTION, cache="query", max_new_tokens=1).cached_tokens > 0
    assert ask(tiny_model, index, QUESTION, cache="none", max_new_tokens=1).cached_tokens == 0
    tiny_model.generation_adapter = False
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=2)
    with pytest.raises(KVSourceError, match="another RAG prompt"):
        build_context(tiny_model, index, query, sources, mode="doc", prompt=RagPrompt(system="Be brief."))


def test_states_recorded_under_the_shipped_adapters_former_name_are_its_own(tiny_model):
    from genembed.retrieval.kv_source import check_kv_source

    tiny_model.adapter, tiny_model.generation_adapter = "smollm2-135m-joint", "adapter"
    prompt = RagPrompt()
    stored = {"backbone": "tiny-llama-0", "adapter": "smollm2-135m-gircse", "attention": "causal"}
    stored["prompt"] = prompt.to_dict()
    check_kv_source(stored, tiny_model, prompt, index="idx")  # the folder's name before it was renamed: accepted
    with pytest.raises(KVSourceError, match="stores KV states of tiny-llama-0 \\+ adapter my-lora"):
        check_kv_source(stored | {"adapter": "my-lora"}, tiny_model, prompt, index="idx")


def test_an_index_without_a_record_of_its_states_is_refused(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "grit")
    manifest = json.loads((index.path / MANIFEST).read_text())
    del manifest["kv"]["source"]  # as written before the source was recorded
    (index.path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(KVSourceError, match="without a record of the weights.*Rebuild it with"):
        ask(tiny_model, FaissStore.load(index.path), QUESTION, cache="doc")


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
    assert plain.cached_tokens == 0 and plain.prompt_tokens == answer.prompt_tokens and plain.order == "doc_first"


def test_ask_with_rerank_reorders_the_candidates(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    answer = ask(tiny_model, index, QUESTION, cache="doc", top_k=2, rerank=True, rerank_candidates=5, max_new_tokens=2)
    scores = [s.rerank_score for s in answer.sources]
    assert None not in scores and scores == sorted(scores, reverse=True)
    expected = tiny_model.rerank(
        QUESTION, [index.text(s.row) for s in retrieve(tiny_model, index, QUESTION, top_k=5)[1]]
    )
    assert scores[0] == pytest.approx(expected[0].score, abs=1e-5)


def test_the_prompt_layout(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=2)
    texts = [index.text(s.row) for s in sources]
    decode = tiny_model.backbone.tokenizer.decode
    system = "<|im_start|>system\nAnswer the question using only the passages. Reply with the exact words from "
    system += "the passage.<|im_end|>\n"
    question = f"<|im_start|>user\nQuestion: {QUESTION}"
    tail = "<|im_end|>\n<|im_start|>assistant\n"
    doc_first = build_context(tiny_model, index, query, sources, mode="none")
    assert decode(doc_first.fresh_ids) == system + f"{texts[0]}\n\n{texts[1]}\n\n" + question + tail
    query_first = build_context(tiny_model, index, query, sources, mode="none", order="query_first")
    assert decode(query_first.fresh_ids) == system + question + f"\n\n{texts[1]}\n\n{texts[0]}\n\n" + tail
    assert [name for name, *_ in doc_first.layout] == ["head", sources[0].id, sources[1].id, "query", "tail"]
    # the one-pass prompt that generative training rows with passages are tokenized with is ask's, token for token
    tok = tiny_model.backbone.tokenizer
    assert RagPrompt().prompt_ids(tok, texts, QUESTION) == doc_first.fresh_ids
    assert RagPrompt().prompt_ids(tok, texts, QUESTION, "query_first") == query_first.fresh_ids
    with pytest.raises(ValueError, match="order must be 'doc_first' or 'query_first', got 'last'"):
        RagPrompt().prompt_ids(tok, texts, QUESTION, "last")


def test_mode_errors(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean", store_kv=False)
    with pytest.raises(ValueError, match="stores no KV states: rebuild it with --store-kv"):
        ask(tiny_model, index, QUESTION, cache="doc")
    with pytest.raises(ValueError, match="cache mode must be one of"):
        ask(tiny_model, index, QUESTION, cache="passage")
    with pytest.raises(ValueError, match="puts the doc first"):
        ask(tiny_model, index, QUESTION, cache="docquery", order="query_first")
    assert mode_layout("none") == ("doc_first", False, False) and mode_layout("query") == ("doc_first", True, False)
    assert mode_layout("querydoc") == ("query_first", True, True)
    # query caching needs no stored states
    assert ask(tiny_model, index, QUESTION, cache="query", max_new_tokens=1).cached_tokens > 0


def _isolated(context: Context) -> list[int]:
    """Positions of cached segments placed after a segment other than the head."""
    after_first = [seg for seg in context.layout[:-1] if seg[0] != "head"][1:]
    return [p for _, start, stop, cached in after_first if cached for p in range(start, stop)]


@pytest.mark.parametrize("mode", CACHED_MODES)
def test_recomputing_every_isolated_token_gives_plain_rag(tiny_model, docs_file, tmp_path, mode):
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3, keep_query_kv=True)
    plain = build_context(tiny_model, index, query, sources, mode="none", order=mode_layout(mode)[0])
    isolated = build_context(tiny_model, index, query, sources, mode=mode)
    blended = build_context(tiny_model, index, query, sources, mode=mode, recompute=1.0)
    assert isolated.recomputed == 0 and blended.recomputed == len(_isolated(blended)) > 0
    assert blended.total_tokens == plain.total_tokens and blended.layout == isolated.layout
    tokens, logits = _greedy(tiny_model, blended)
    plain_tokens, plain_logits = _greedy(tiny_model, plain)
    assert tokens == plain_tokens
    torch.testing.assert_close(logits, plain_logits, atol=1e-4, rtol=1e-4)
    assert (_greedy(tiny_model, isolated, 1)[1] - plain_logits).abs().max() > 2e-4  # what was recovered


def test_blend_recomputes_the_tokens_that_isolation_changed_most(tiny_model, docs_file, tmp_path):
    """The chosen tokens are the top share by layer-1 deviation from a full pass, their layer-1 states
    become exact (layer 0 never depends on other tokens), and the kept states stay as they were."""
    from genembed.retrieval.kv_blend import blend, deviations

    index = _index(tiny_model, docs_file, tmp_path, "mean")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3)
    context = build_context(tiny_model, index, query, sources, mode="doc")
    plain = build_context(tiny_model, index, query, sources, mode="none")
    full = _full_pass(tiny_model, plain)
    past = context.past_tokens
    ids = plain.fresh_ids[:past]
    (k1, v1), (fk1, fv1) = cache_layers(context.cache)[1], full[1]
    expected = (
        (k1 - fk1[..., :past, :]).square().sum((0, 1, 3)) + (v1 - fv1[..., :past, :]).square().sum((0, 1, 3))
    ).sqrt()
    lm = tiny_model.backbone.model
    torch.testing.assert_close(deviations(lm, context.cache, ids), expected, atol=1e-5, rtol=1e-4)
    candidates = _isolated(context)
    assert expected[: candidates[0]].max() < 1e-4 < expected[candidates].max()  # head and first passage are exact
    before = [(k.clone(), v.clone()) for k, v in cache_layers(context.cache)]
    cache, chosen = blend(lm, context.cache, ids, candidates, 0.25)
    n = -(-len(candidates) // 4)
    assert chosen == sorted(torch.tensor(candidates)[expected[candidates].topk(n).indices].tolist())
    kept = [p for p in range(past) if p not in chosen]
    for layer, ((k, v), (bk, bv)) in enumerate(zip(cache_layers(cache), before, strict=True)):
        torch.testing.assert_close(k[..., : len(kept), :], bk[..., kept, :], atol=0, rtol=0)
        torch.testing.assert_close(v[..., : len(kept), :], bv[..., kept, :], atol=0, rtol=0)
        if layer <= 1:
            torch.testing.assert_close(k[..., len(kept) :, :], full[layer][0][..., chosen, :], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(v[..., len(kept) :, :], full[layer][1][..., chosen, :], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match=r"recompute must be in \[0, 1\], got 1.5"):
        build_context(tiny_model, index, query, sources, mode="doc", recompute=1.5)
    with pytest.raises(ValueError, match=r"recompute must be in \[0, 1\], got -0.1"):  # checked with nothing cached too
        build_context(tiny_model, index, query, sources, mode="none", recompute=-0.1)
    assert blend(lm, cache, ids, candidates, 0.0) == (cache, [])


def test_max_length_cuts_the_question_prompt(tiny_model, docs_file, tmp_path):
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    long_question = QUESTION + " Please answer in detail, citing every passage you read." * 5
    full, _ = retrieve(tiny_model, index, long_question, top_k=1)
    cut, _ = retrieve(tiny_model, index, long_question, top_k=1, max_length=40)
    assert len(full.ids) > 40 and len(cut.ids) == 40
    assert not torch.allclose(torch.as_tensor(cut.embeddings), torch.as_tensor(full.embeddings))


def test_the_isolation_note_names_what_a_lossy_mode_gives_up():
    from genembed.retrieval.context import isolation_note

    assert isolation_note("none", None, 3) is None
    assert isolation_note("query", "query_first", 3) is None  # GRIT's layout: the cached query comes first
    assert isolation_note("doc", None, 1) is None  # one passage, first after the head
    assert "the passages after the first never attended" in isolation_note("doc", None, 3)
    assert "the question never attended" in isolation_note("query", None, 1)
    assert "the passages never attended" in isolation_note("querydoc", None, 1)
    assert "the passages after the first and the question" in isolation_note("docquery", None, 2)
    assert "docs/rag.md" in isolation_note("docquery", None, 1)
    with pytest.raises(ValueError, match="cache mode must be one of"):
        isolation_note("passage", None, 1)


@pytest.mark.parametrize(
    ("mode", "order"),
    [(m, o) for m in ("query", "doc") for o in ("doc_first", "query_first")] + [("querydoc", None), ("docquery", None)],
)
def test_a_cached_prompt_is_the_plain_prompt_of_its_order(tiny_model, docs_file, tmp_path, mode, order):
    """Issue 62's equivalence: caching changes which states are reused, never the prompt. Every cached
    layout has plain RAG's segments, in its order, at the same positions (a cached segment's keys are
    rotated there, tested above), and the same tokens left to compute after them."""
    index = _index(tiny_model, docs_file, tmp_path, "mean")
    query, sources = retrieve(tiny_model, index, QUESTION, top_k=3, keep_query_kv=True)
    context_order = mode_layout(mode, order)[0]
    cached = build_context(tiny_model, index, query, sources, mode=mode, order=order)
    plain = build_context(tiny_model, index, query, sources, mode="none", order=context_order)
    assert [seg[:3] for seg in cached.layout] == [seg[:3] for seg in plain.layout]
    assert cached.total_tokens == plain.total_tokens == plain.layout[-1][2]
    assert cached.fresh_ids == plain.fresh_ids[plain.total_tokens - len(cached.fresh_ids) :]
    names = [name for name, *_ in plain.layout]
    passages = [s.id for s in sources]
    if context_order == "doc_first":  # the best passage first, where its states are exact
        assert names == ["head", *passages, "query", "tail"]
    else:  # the best passage last, next to the answer (the question is first)
        assert names == ["head", "query", *passages[::-1], "tail"]
