from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from genembed.generation.decoding import decode_stream, sample_next
from genembed.generation.sampling import SamplingOptions

OFF = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0}  # plain greedy decoding, no penalty

PROMPT = "What is the capital of France?"


def _ids(backbone, text: str = PROMPT) -> torch.Tensor:
    return torch.tensor([backbone.tokenizer(text, add_special_tokens=False)["input_ids"]])


def _reference(model, ids: torch.Tensor, n: int) -> list[int]:
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, eos_token_id=None, pad_token_id=0
    )
    return out[0, ids.shape[1] :].tolist()


def test_greedy_matches_hf_generate(chatty):
    ids = _ids(chatty)
    ours = list(decode_stream(chatty.model, ids, max_new_tokens=24, **OFF))
    assert ours == _reference(chatty.model, ids, 24)
    assert len(set(ours)) > 1  # a non-trivial continuation, so the comparison can fail


def test_prefilled_cache_equals_full_sequence(chatty):
    ids = _ids(chatty)
    split = 4
    cache = _prefill(chatty.model, ids[:, :split])
    assert cache.get_seq_length() == split
    from_cache = list(decode_stream(chatty.model, ids[:, split:], cache=cache, max_new_tokens=16))
    assert from_cache == list(decode_stream(chatty.model, ids, max_new_tokens=16))
    assert cache.get_seq_length() == ids.shape[1] + 15  # extended in place (the last token is never fed back)


def _prefill(model, ids: torch.Tensor) -> DynamicCache:
    cache = DynamicCache()
    with torch.no_grad():
        model.model(input_ids=ids, cache=cache, use_cache=True)
    return cache


def test_explicit_positions(chatty):
    """Passages placed at chosen RoPE positions: a cached prefix at 0..3, the new tokens after a gap."""
    ids = _ids(chatty)
    split, n, gap = 4, ids.shape[1], 40
    placed = torch.arange(split, n)[None] + gap
    cached = _prefill(chatty.model, ids[:, :split])
    from_cache = list(decode_stream(chatty.model, ids[:, split:], cache=cached, position_ids=placed, max_new_tokens=6))
    full = DynamicCache()
    positions = torch.cat([torch.arange(split)[None], placed], dim=1)
    in_one_go = list(decode_stream(chatty.model, ids, cache=full, position_ids=positions, max_new_tokens=6))
    assert from_cache == in_one_go
    torch.testing.assert_close(cached.layers[0].keys, full.layers[0].keys)
    # generated tokens continue at the previous position + 1 (keys carry RoPE, so positions show in them)
    no_gap = _prefill(chatty.model, ids[:, :split])
    list(decode_stream(chatty.model, ids[:, split:], cache=no_gap, max_new_tokens=6))
    assert not torch.allclose(no_gap.layers[0].keys[:, :, split:], cached.layers[0].keys[:, :, split:], atol=1e-3)
    torch.testing.assert_close(no_gap.layers[0].keys[:, :, :split], cached.layers[0].keys[:, :, :split])


def test_eos_stops_and_is_not_yielded(chatty):
    ids = _ids(chatty)
    tokens = list(decode_stream(chatty.model, ids, max_new_tokens=10))
    stop = tokens[3]
    cut = list(decode_stream(chatty.model, ids, max_new_tokens=10, eos_token_ids={stop}))
    assert cut == tokens[: tokens.index(stop)]


def test_lazy_and_max_new_tokens(chatty):
    ids = _ids(chatty)
    assert list(decode_stream(chatty.model, ids, max_new_tokens=0)) == []
    stream = decode_stream(chatty.model, ids, max_new_tokens=50)
    first = [next(stream) for _ in range(3)]
    assert first == list(decode_stream(chatty.model, ids, max_new_tokens=3))


def test_seeded_sampling_is_reproducible_and_differs_from_greedy(chatty):
    ids = _ids(chatty)

    def run(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return list(decode_stream(chatty.model, ids, max_new_tokens=20, temperature=1.5, generator=gen))

    assert run(1) == run(1)
    assert run(1) != run(2) or run(1) != list(decode_stream(chatty.model, ids, max_new_tokens=20))


def test_bad_inputs(chatty):
    ids = _ids(chatty)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(1, T\)"):
        next(decode_stream(chatty.model, ids.repeat(2, 1)))
    with pytest.raises(ValueError, match="attention_mask must cover past"):
        next(decode_stream(chatty.model, ids, attention_mask=torch.ones((1, 2), dtype=torch.long)))
    with pytest.raises(ValueError, match="position_ids must have shape"):
        next(decode_stream(chatty.model, ids, position_ids=torch.arange(2)[None]))


def test_sample_next_greedy_and_top_p():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, 0.0]])
    assert sample_next(logits).tolist() == [1, 0]
    gen = torch.Generator().manual_seed(0)
    # top_p small enough keeps only the top token: sampling equals greedy
    draws = torch.stack([sample_next(logits, temperature=1.0, top_p=0.05, generator=gen) for _ in range(50)])
    assert (draws == torch.tensor([1, 0])).all()
    # top_p = 0.9 on row 0 keeps tokens 1 and 3 (p = .48, .44, cumulative .92) and never 0 or 2
    draws = torch.stack([sample_next(logits, temperature=1.0, top_p=0.9, generator=gen) for _ in range(400)])
    assert set(draws[:, 0].tolist()) == {1, 3}
    # a top_p too small for float32 (found by the API fuzz) and a tiny temperature still keep the top token
    tiny = sample_next(logits, temperature=1e-12, top_p=5e-324, generator=gen)
    assert tiny.tolist() == [1, 0]
    for temperature in (5e-324, 1e-30, 1e-6):  # below float32's range, or overflowing logits / temperature
        assert sample_next(logits, temperature=temperature, generator=gen).tolist() == [1, 0]


def test_sample_next_matches_softmax_frequencies():
    logits = torch.tensor([[1.0, 0.0, -1.0]])
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_next(logits.expand(1000, 3), temperature=2.0, generator=gen) for _ in range(10)])
    freq = torch.bincount(draws, minlength=3).float() / draws.numel()
    expected = torch.softmax(logits[0] / 2.0, dim=-1)
    assert torch.allclose(freq, expected, atol=0.02)


def test_sample_next_bad_settings():
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sample_next(torch.zeros(1, 3), temperature=-1.0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        sample_next(torch.zeros(1, 3), top_p=0.0)


def _processors(**knobs):
    return SamplingOptions(**{**OFF, **knobs}).logits_processor()


def test_repetition_processors_see_only_the_answer(tiny):
    """The tiny model's tied head repeats the last token forever; the processors stop repeats within the
    answer but, seeing only the answer's ids, still let it copy a prompt token."""
    ids = _ids(tiny)
    plain = list(decode_stream(tiny.model, ids, max_new_tokens=8, **OFF))
    assert len(set(plain)) == 1 and plain[0] == int(ids[0, -1])
    guarded = list(
        decode_stream(tiny.model, ids, max_new_tokens=12, logits_processor=_processors(no_repeat_ngram_size=2))
    )
    assert guarded[0] == plain[0] and len(set(guarded)) > 2
    bigrams = list(zip(guarded, guarded[1:], strict=False))
    assert len(bigrams) == len(set(bigrams))
    for knobs in ({"repetition_penalty": 1e4}, {"presence_penalty": 2.0}, {"frequency_penalty": 2.0}):
        penalised = list(decode_stream(tiny.model, ids, max_new_tokens=6, logits_processor=_processors(**knobs)))
        assert penalised[0] == plain[0] and penalised != plain[:6], knobs
    # the defaults are on: the same as passing the sampling options' processors
    assert list(decode_stream(tiny.model, ids, max_new_tokens=8)) == list(
        decode_stream(tiny.model, ids, max_new_tokens=8, logits_processor=SamplingOptions().logits_processor())
    )


def test_processors_follow_the_settings():
    assert _processors() is None
    names = [
        type(p).__name__ for p in _processors(repetition_penalty=1.3, no_repeat_ngram_size=3, presence_penalty=0.1)
    ]
    assert names == [
        "RepetitionPenaltyLogitsProcessor",
        "NoRepeatNGramLogitsProcessor",
        "FrequencyPresencePenaltyLogitsProcessor",
    ]


def test_frequency_and_presence_penalties_are_openais_formula():
    from genembed.generation.penalties import FrequencyPresencePenaltyLogitsProcessor

    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    ids = torch.tensor([[2, 2, 2, 0]])  # token 2 three times, token 0 once
    out = FrequencyPresencePenaltyLogitsProcessor(frequency_penalty=0.5, presence_penalty=0.25)(ids, scores)
    # mu[j] - c[j] * 0.5 - (c[j] > 0) * 0.25
    assert out.tolist() == [[1.0 - 0.5 - 0.25, 2.0, 3.0 - 1.5 - 0.25, 4.0]]
    encourage = FrequencyPresencePenaltyLogitsProcessor(frequency_penalty=-1.0, presence_penalty=0.0)(ids, scores)
    assert encourage.tolist() == [[2.0, 2.0, 6.0, 4.0]]
