"""Which weights generate: the one type and the one rule (genembed.generation.weights)."""

from __future__ import annotations

import pytest

from genembed.generation.weights import ADAPTER, BASE, GENERATION, as_weights, choose_weights


@pytest.mark.parametrize(
    ("asked", "saved", "generator", "joint", "expected"),
    [
        (BASE, ADAPTER, True, True, BASE),  # the caller wins
        (None, BASE, True, True, BASE),  # then the saved choice
        (None, GENERATION, True, False, GENERATION),
        (None, None, True, True, GENERATION),  # then a generation adapter
        (None, None, False, True, ADAPTER),  # then an adapter trained to generate too
        (None, None, False, False, BASE),
    ],
)
def test_the_rule_in_its_order(asked, saved, generator, joint, expected):
    assert choose_weights(asked, saved=saved, generator=generator, joint=joint) == expected


def test_the_former_bool_spellings_still_work_with_a_deprecation_warning():
    with pytest.deprecated_call(match="use 'adapter'"):
        assert as_weights(True) == ADAPTER
    with pytest.deprecated_call(match="use 'base'"):
        assert choose_weights(False) == BASE
    assert choose_weights(None, saved=True) == ADAPTER  # a saved file's value is read silently
    with pytest.raises(ValueError, match="must be one of"):
        as_weights("embedding")
    with pytest.raises(TypeError, match="must be a bool or one of"):
        as_weights(1)


def test_a_model_holds_one_type_and_load_takes_it(tiny_model):
    with pytest.deprecated_call():
        tiny_model.generation_adapter = True
    assert tiny_model.generation_adapter == ADAPTER
    tiny_model.generation_adapter = BASE
    assert tiny_model.generation_adapter == BASE
    with pytest.raises(ValueError, match="valid only with a generation adapter loaded"):
        tiny_model.generation_adapter = GENERATION


def test_load_takes_the_weights_by_name(tiny_folder):
    import genembed

    assert genembed.load(tiny_folder, generation_adapter="adapter").generation_adapter == ADAPTER
    with pytest.deprecated_call():
        assert genembed.load(tiny_folder, generation_adapter=False).generation_adapter == BASE
