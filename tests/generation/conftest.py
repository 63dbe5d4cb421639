"""A tiny backbone whose greedy continuations vary with the prompt.

The shared tiny model ties its LM head to a 3x-scaled embedding, so greedy decoding just repeats the
last token; comparisons of decoding paths would then pass vacuously. An untied random head fixes that.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def chatty(tiny):
    gen = torch.Generator().manual_seed(1)
    head = tiny.model.lm_head
    head.weight = torch.nn.Parameter(torch.randn(head.weight.shape, generator=gen) * 2.0)
    return tiny


@pytest.fixture
def chatty_model(chatty):
    from genembed.model import GenerativeEmbedder

    return GenerativeEmbedder(chatty)
