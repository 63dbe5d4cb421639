"""Which weights chat and reranking use when a LoRA adapter is attached (``generation_adapter``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from genembed.generation.adapters import BaseWeightsWarning

PROMPT = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "I love this movie."]


@pytest.fixture
def pair(chatty):
    """(model without adapter, same model with a non-trivial LoRA adapter)."""
    from peft import LoraConfig, get_peft_model

    from genembed.model import GenerativeEmbedder

    base = GenerativeEmbedder(copy.deepcopy(chatty))
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    chatty.model = get_peft_model(chatty.model, config).eval()
    return base, GenerativeEmbedder(chatty, adapter="test-lora")


def test_default_generates_with_base_weights(pair):
    base, adapted = pair
    assert adapted.generation_adapter == "base"
    with pytest.warns(BaseWeightsWarning, match="raw backbone weights") as caught:
        reply = adapted.generate(PROMPT, max_new_tokens=20)
    assert caught[0].filename == __file__  # the warning names the caller's line, not genembed's
    assert reply == base.generate(PROMPT, max_new_tokens=20)
    assert [r.score for r in adapted.rerank(PROMPT, DOCS)] == pytest.approx(
        [r.score for r in base.rerank(PROMPT, DOCS)]
    )
    # embedding always uses the adapter
    assert float(adapted.encode(PROMPT, method="mean") @ base.encode(PROMPT, method="mean")) < 0.9999


def test_generation_adapter_true_uses_the_adapter(pair):
    base, adapted = pair
    adapted.generation_adapter = True
    assert adapted.generate(PROMPT, max_new_tokens=20) != base.generate(PROMPT, max_new_tokens=20)
    assert [r.score for r in adapted.rerank(PROMPT, DOCS)] != pytest.approx(
        [r.score for r in base.rerank(PROMPT, DOCS)], abs=1e-4
    )


def test_a_paused_stream_leaves_the_adapter_enabled(pair):
    _, adapted = pair
    before = adapted.encode(PROMPT, method="mean")
    with pytest.warns(BaseWeightsWarning):
        stream = adapted.generate(PROMPT, max_new_tokens=20, stream=True)
    next(stream)
    np.testing.assert_allclose(adapted.encode(PROMPT, method="mean"), before, atol=1e-6)
    rest = "".join(stream)
    assert rest


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        (None, None),
        ("base", "base"),
        ("BASE", "base"),
        ("adapter", "adapter"),
        ("Adapter", "adapter"),
        ("runs/gen", "runs/gen"),
    ],
)
def test_generator_choice_spells_load_s_generation_adapter(spelling, expected):
    from genembed.generation.adapters import generator_choice

    got = generator_choice(spelling)
    assert got == expected and type(got) is type(expected)


def test_the_weights_that_generate_are_named_and_the_raw_backbone_noted(pair):
    import warnings

    from genembed.generation.adapters import BaseWeightsWarning, base_weights_note

    base, adapted = pair
    name = base.backbone.name
    assert base.generation_weights == adapted.generation_weights == f"{name} (base weights)"
    assert base_weights_note(base) is None  # no adapter: the backbone is all there is
    note = base_weights_note(adapted)
    assert "raw backbone weights (adapter test-lora is trained for embeddings only)" in note
    assert "use the default adapter (genembed.load())" in note and "--generator FOLDER" in note
    with pytest.warns(BaseWeightsWarning, match="adapter test-lora is trained for embeddings only"):
        adapted.generate(PROMPT, max_new_tokens=2)
    adapted.generation_adapter = True  # what a default that generates with its own adapter does
    assert adapted.generation_weights == f"{name} + adapter test-lora" and base_weights_note(adapted) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", BaseWeightsWarning)
        adapted.generate(PROMPT, max_new_tokens=2)
        base.generate(PROMPT, max_new_tokens=2)


def test_a_jointly_trained_adapter_switched_off_is_pointed_back_to(pair):
    from genembed.generation.adapters import base_weights_note
    from genembed.models.trained_for import TrainedFor

    _, adapted = pair
    adapted.trained_for = TrainedFor(method="gircse", attention="causal", generation=True, config="joint.yaml")
    assert "--generator adapter" in base_weights_note(adapted)
