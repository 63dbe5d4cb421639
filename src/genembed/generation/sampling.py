"""How a reply is decoded: the one decoding configuration of ``generate``, chat, RAG answers and the chat route.

A :class:`SamplingOptions` is checked when it is made, so a bad value fails before any token is
decoded. Public calls keep their keywords (``model.generate(prompt, max_new_tokens=64)``,
``ask(..., temperature=0.7)``) and turn them into one with :meth:`SamplingOptions.build`, so each
default is written here once; a caller with other defaults (RAG answers) keeps one instance of them.
The names are transformers' ``GenerationConfig`` names (``max_new_tokens``, ``temperature``,
``top_p``, ``repetition_penalty``, ``no_repeat_ngram_size``) plus OpenAI's ``frequency_penalty`` and
``presence_penalty`` and ``stop``; the CLI spells them with dashes (``--repetition-penalty``) and the
chat route takes them as JSON fields of the same names.

The defaults keep greedy decoding from looping (the default model repeats a sentence to the token
limit on everyday prompts without them); docs/experiments.md has the measurement that chose them.

>>> SamplingOptions.build(temperature=0.7, seed=1).temperature
0.7
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

__all__ = ["ANSWER_SAMPLING", "SamplingKwargs", "SamplingOptions"]


class SamplingKwargs(TypedDict, total=False):
    """The keywords of :class:`SamplingOptions`, for ``**options: Unpack[SamplingKwargs]`` signatures."""

    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    repetition_penalty: float
    no_repeat_ngram_size: int
    frequency_penalty: float
    presence_penalty: float
    stop: str | Sequence[str] | None


@dataclass(frozen=True)
class SamplingOptions:
    """How a reply is decoded.

    Raises:
        ValueError: a value out of range (the message names the field and the allowed range).
    """

    max_new_tokens: int = 256  # the most tokens to generate
    temperature: float = 0.0  # 0 picks the argmax (greedy, deterministic); else logits are divided by it
    top_p: float = 1.0  # nucleus sampling: keep the most probable tokens reaching this mass (1.0: all)
    seed: int | None = None  # seeds sampling (temperature > 0) for reproducible replies
    repetition_penalty: float = 1.2  # divide the logits of tokens already in the reply by this (1.0: off)
    no_repeat_ngram_size: int = 4  # no n-gram of this size twice in the reply (0: off)
    frequency_penalty: float = 0.0  # OpenAI's: subtract this times each token's count in the reply
    presence_penalty: float = 0.0  # OpenAI's: subtract this from every token already in the reply
    stop: tuple[str, ...] = ()  # strings that end the reply; it is cut before the first one

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "no_repeat_ngram_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:  # OpenAI's range
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")
        object.__setattr__(self, "stop", _stop_strings(self.stop))

    @classmethod
    def build(cls, base: SamplingOptions | None = None, /, **changes: Any) -> SamplingOptions:
        """``base`` (default: the defaults above) with ``changes``, the keywords of a public call.

        Raises:
            TypeError: a keyword that is not a sampling option (the message lists the known ones).
        """
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            known = ", ".join(f.name for f in dataclasses.fields(cls))
            raise TypeError(f"unknown sampling option(s) {', '.join(unknown)}; known: {known}")
        return dataclasses.replace(base or cls(), **changes)

    def generator(self, device: Any) -> Any:
        """A ``torch.Generator`` on ``device`` seeded with ``seed``, or None without a seed."""
        if self.seed is None:
            return None
        import torch

        return torch.Generator(device=device).manual_seed(self.seed)

    def logits_processor(self) -> Any:
        """The logits processors against repetition (a transformers ``LogitsProcessorList``), or None
        when all are off: transformers' ``RepetitionPenaltyLogitsProcessor`` and
        ``NoRepeatNGramLogitsProcessor``, then OpenAI's frequency and presence penalties
        (:mod:`~genembed.generation.penalties`)."""
        from transformers import LogitsProcessorList, NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor

        processors = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        if self.no_repeat_ngram_size:
            processors.append(NoRepeatNGramLogitsProcessor(self.no_repeat_ngram_size))
        if self.frequency_penalty or self.presence_penalty:
            from .penalties import FrequencyPresencePenaltyLogitsProcessor

            processors.append(FrequencyPresencePenaltyLogitsProcessor(self.frequency_penalty, self.presence_penalty))
        return processors or None


def _stop_strings(stop: Any) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings (one string, a sequence of them, or None)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, Sequence):
        raise TypeError(f"stop must be a string or a list of strings, got {type(stop).__name__}")
    for i, s in enumerate(stop):
        if not isinstance(s, str):
            raise TypeError(f"stop[{i}] must be a string, got {type(s).__name__}")
        if not s:
            raise ValueError(f"stop[{i}] is empty: a stop string must have at least one character")
    return tuple(stop)


# How RAG answers (genembed.retrieval.rag.ask, `genembed ask`) are decoded unless a call says otherwise:
# shorter than a chat reply, and no 4-gram twice in an answer (applied to the answer's own tokens, not the
# prompt's, so copying a passage is not discouraged). Without it the bundled 135M model loops, e.g.
# 'The answer to the question is: "The answer to the question is: ...' (docs/rag.md). No repetition
# penalty: the RAG measurements of docs/rag.md were made without one, and the 4-gram ban keeps answers
# from looping on its own.
ANSWER_SAMPLING = SamplingOptions(max_new_tokens=128, repetition_penalty=1.0, no_repeat_ngram_size=4)
