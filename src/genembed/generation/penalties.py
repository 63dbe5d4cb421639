"""OpenAI's frequency and presence penalties as a transformers logits processor.

transformers has the CTRL repetition penalty (``RepetitionPenaltyLogitsProcessor``, which divides a
seen token's logit) and the n-gram ban, but not OpenAI's additive penalties, which the chat route
takes under OpenAI's names. OpenAI defines them on the logits ``mu`` as::

    mu[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty

where ``c[j]`` counts token ``j`` in the text sampled so far (vLLM does the same over the output tokens).
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

__all__ = ["FrequencyPresencePenaltyLogitsProcessor"]


class FrequencyPresencePenaltyLogitsProcessor(LogitsProcessor):
    """Subtract ``frequency_penalty`` per earlier occurrence and ``presence_penalty`` once from the logit
    of every token already in ``input_ids`` (negative values encourage repetition, as OpenAI allows).

    Args:
        frequency_penalty: the penalty per occurrence.
        presence_penalty: the penalty of a token that occurred at least once.
    """

    def __init__(self, frequency_penalty: float, presence_penalty: float):
        self.frequency_penalty = float(frequency_penalty)
        self.presence_penalty = float(presence_penalty)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        counts = torch.zeros_like(scores)  # (B, V)
        counts.scatter_add_(-1, input_ids, torch.ones_like(input_ids, dtype=scores.dtype))
        return scores - counts * self.frequency_penalty - (counts > 0).to(scores.dtype) * self.presence_penalty
