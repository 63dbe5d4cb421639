"""How tokens are picked: the one sampling-options type of chat, RAG answers and the decoding loop.

A :class:`SamplingOptions` is checked when it is made, so a bad value fails before any token is
decoded. Public calls keep their keywords (``model.generate(prompt, max_new_tokens=64)``,
``ask(..., temperature=0.7)``) and turn them into one with :meth:`SamplingOptions.build`, so each
default is written here once; a caller with other defaults (RAG answers) keeps one instance of them.

>>> SamplingOptions.build(temperature=0.7, seed=1)
SamplingOptions(max_new_tokens=256, temperature=0.7, top_p=1.0, seed=1, no_repeat_ngram_size=0, repetition_penalty=1.0)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypedDict

__all__ = ["SamplingKwargs", "SamplingOptions"]


class SamplingKwargs(TypedDict, total=False):
    """The keywords of :class:`SamplingOptions`, for ``**options: Unpack[SamplingKwargs]`` signatures."""

    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    no_repeat_ngram_size: int
    repetition_penalty: float


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
    no_repeat_ngram_size: int = 0  # no n-gram of this size twice in the reply (0: off)
    repetition_penalty: float = 1.0  # divide the logits of tokens already in the reply by this (1.0: off)

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
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")

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
        """transformers logits processors against repetition, or None when both are off."""
        if not self.no_repeat_ngram_size and self.repetition_penalty == 1.0:
            return None
        from transformers import LogitsProcessorList, NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor

        processors = LogitsProcessorList()
        if self.no_repeat_ngram_size:
            processors.append(NoRepeatNGramLogitsProcessor(self.no_repeat_ngram_size))
        if self.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        return processors
