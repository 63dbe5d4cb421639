"""SamplingOptions: one place for the decoding defaults, checked when made, built from public keywords."""

from __future__ import annotations

import pytest
import torch

from genembed.generation.sampling import ANSWER_SAMPLING, SamplingOptions
from genembed.retrieval.rag import ANSWER_SAMPLING as RAG_ANSWER_SAMPLING


def test_defaults_are_greedy_and_guard_against_loops():
    options = SamplingOptions()
    assert (options.max_new_tokens, options.temperature, options.top_p, options.seed) == (256, 0.0, 1.0, None)
    assert options.generator("cpu") is None and options.stop == ()
    # the measured defaults (docs/experiments.md, "Decoding defaults")
    assert (options.repetition_penalty, options.no_repeat_ngram_size) == (1.2, 4)
    assert (options.frequency_penalty, options.presence_penalty) == (0.0, 0.0)
    off = SamplingOptions(repetition_penalty=1.0, no_repeat_ngram_size=0)
    assert off.logits_processor() is None


def test_stop_is_one_string_or_several():
    assert SamplingOptions(stop="\n\n").stop == ("\n\n",)
    assert SamplingOptions.build(stop=["a", "b"]).stop == ("a", "b")
    assert SamplingOptions(stop=None).stop == ()
    with pytest.raises(ValueError, match=r"stop\[1\] is empty"):
        SamplingOptions(stop=["a", ""])
    with pytest.raises(TypeError, match=r"stop\[0\] must be a string, got int"):
        SamplingOptions(stop=[3])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_new_tokens": -1}, "max_new_tokens must be an int >= 0, got -1"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 0, got 2.5"),
        ({"temperature": -0.1}, "temperature must be >= 0, got -0.1"),
        ({"temperature": float("nan")}, "temperature must be >= 0, got nan"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
        ({"no_repeat_ngram_size": True}, "no_repeat_ngram_size must be an int >= 0, got True"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0, got 0.0"),
        ({"seed": "7"}, "seed must be an int or None, got '7'"),
        ({"frequency_penalty": 2.5}, r"frequency_penalty must be in \[-2, 2\], got 2.5"),
        ({"presence_penalty": -3.0}, r"presence_penalty must be in \[-2, 2\], got -3.0"),
    ],
)
def test_bad_values_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        SamplingOptions(**changes)


def test_build_changes_a_base_and_refuses_unknown_keywords():
    built = SamplingOptions.build(ANSWER_SAMPLING, temperature=0.5)
    assert built == SamplingOptions(max_new_tokens=128, temperature=0.5, repetition_penalty=1.0, no_repeat_ngram_size=4)
    assert ANSWER_SAMPLING is RAG_ANSWER_SAMPLING  # rag's name for it
    assert SamplingOptions.build() == SamplingOptions() and SamplingOptions.build(built) is not built
    with pytest.raises(TypeError, match=r"unknown sampling option\(s\) max_tokens, topp; known: max_new_tokens, "):
        SamplingOptions.build(max_tokens=3, topp=0.9)


def test_the_seed_makes_a_reproducible_generator_and_penalties_make_processors():
    a, b = SamplingOptions(seed=3).generator("cpu"), SamplingOptions(seed=3).generator("cpu")
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
    assert len(SamplingOptions(no_repeat_ngram_size=3, repetition_penalty=1.3).logits_processor()) == 2
    assert len(SamplingOptions(repetition_penalty=1.3, no_repeat_ngram_size=0).logits_processor()) == 1
    assert len(SamplingOptions(frequency_penalty=0.1).logits_processor()) == 3


def test_generate_takes_the_keywords_or_the_type(tiny_model):
    by_keywords = tiny_model.generate("Hello", max_new_tokens=4, temperature=1.0, seed=5)
    options = SamplingOptions(max_new_tokens=4, temperature=1.0, seed=5)
    assert by_keywords == tiny_model.generate("Hello", sampling=options)
    # keywords change the given options
    longer = SamplingOptions(max_new_tokens=9, seed=5)
    assert by_keywords == tiny_model.generate("Hello", sampling=longer, max_new_tokens=4, temperature=1.0)
    with pytest.raises(TypeError, match="unknown sampling option"):
        tiny_model.generate("Hello", max_tokens=4)
    with pytest.raises(ValueError, match="top_p must be in"):
        tiny_model.generate("Hello", top_p=0.0)
