"""Does a reply loop? The repetition measure of the decoding defaults and the generation benchmark.

A reply *loops* when some word 4-gram occurs more than twice in it: a greedy decoder stuck on a
sentence repeats it to the token limit, while a good answer rarely says the same four words three
times. Words are lowercased runs of letters and digits, so punctuation and line breaks do not hide a
repeat.

>>> loops("Paris is nice. Paris is nice. Paris is nice, I said.")
False
>>> loops("the sea is blue, the sea is blue, the sea is blue, the sea is blue")
True
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

__all__ = ["EVERYDAY_PROMPTS", "loop_rate", "loops", "most_repeated_ngram"]

_WORD = re.compile(r"\w+")

# Prompts the decoding defaults are checked on (issue 62; tests/generation/test_repetition_real.py and
# experiments/decoding_defaults.py): the first three looped to the token limit before the defaults guarded
# against repetition. The defaults were chosen on other, held-aside prompts.
EVERYDAY_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Give me three tips for staying healthy.",
    "How do I boil an egg?",
    "Tell me a fun fact about space.",
)


def most_repeated_ngram(text: str, n: int = 4) -> tuple[tuple[str, ...], int]:
    """The word ``n``-gram of ``text`` that occurs most often and its count (``((), 0)`` when the text
    has fewer than ``n`` words)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    words = _WORD.findall(text.lower())
    grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return grams.most_common(1)[0] if grams else ((), 0)


def loops(text: str, n: int = 4, times: int = 2) -> bool:
    """Whether some word ``n``-gram occurs more than ``times`` times in ``text``."""
    return most_repeated_ngram(text, n)[1] > times


def loop_rate(texts: Iterable[str], n: int = 4, times: int = 2) -> float:
    """The share of ``texts`` that :func:`loops` (0.0 for no texts)."""
    flags = [loops(text, n, times) for text in texts]
    return sum(flags) / len(flags) if flags else 0.0
