"""The loop measure: a reply loops when a word 4-gram occurs more than twice."""

from __future__ import annotations

import pytest

from genembed.generation.repetition import loop_rate, loops, most_repeated_ngram

# what the default model replied at the old defaults (issue 62), cut short
LOOPING = (
    "The capital of France is Paris. You'll find everything from iconic landmarks to historic sites. "
    "You'll find everything from iconic landmarks to historic sites. You'll find everything from iconic "
    "landmarks to historic sites."
)
GOOD = "1. Drink water.\n2. Sleep eight hours.\n3. Walk every day, even for ten minutes."


def test_most_repeated_ngram_counts_words_not_punctuation():
    assert most_repeated_ngram(LOOPING) == (("you", "ll", "find", "everything"), 3)
    assert most_repeated_ngram("Sea, SEA sea! sea", n=1) == (("sea",), 4)
    assert most_repeated_ngram("too short", n=4) == ((), 0)
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        most_repeated_ngram("x", n=0)


def test_more_than_twice_is_a_loop():
    twice = "the sea is blue and the sea is blue"
    assert not loops(twice) and loops(twice + " and the sea is blue")
    assert loops(LOOPING) and not loops(GOOD)
    assert loops(twice, times=1)  # the threshold is a parameter


def test_loop_rate_is_the_share_of_looping_replies():
    assert loop_rate([LOOPING, GOOD, GOOD, LOOPING]) == 0.5
    assert loop_rate(iter([GOOD])) == 0.0 and loop_rate([]) == 0.0
