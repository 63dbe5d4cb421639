"""``GenerativeEmbedder`` hands encoding, generation and saving to collaborators that hold no model
(``genembed._encoding``, ``genembed._generation``, ``genembed._persistence``, through
``genembed._delegate``): the public methods keep their signatures and docstrings, a model made by
``with_settings`` shares the weights and nothing else, and warnings still name the caller's line."""

from __future__ import annotations

import gc
import inspect
import pydoc
import warnings

import numpy as np
import pytest

from genembed._encoding import Encoding
from genembed._generation import Generation
from genembed._persistence import Persistence
from genembed.generation.adapters import BaseWeightsWarning
from genembed.model import GenerativeEmbedder
from genembed.models.trained_for import TrainedFor, UntrainedAdapterWarning

TEXTS = ["a cat sat on the mat", "stock markets fell sharply", "the kitten is sleeping"]
DELEGATED = {
    Encoding: ("encode", "encode_query", "encode_document", "embed_settings", "get_sentence_embedding_dimension"),
    Generation: ("generate", "rerank"),
    Persistence: ("save",),
}


def test_the_models_methods_show_the_collaborators_signatures_and_docstrings():
    for collaborator, names in DELEGATED.items():
        for name in names:
            own, theirs = getattr(GenerativeEmbedder, name), getattr(collaborator, name)
            assert own.__doc__ == theirs.__doc__ and own.__doc__, name
            model_side = list(inspect.signature(theirs).parameters.values())[2:]  # after the collaborator and model
            assert list(inspect.signature(own).parameters.values())[1:] == model_side, name
            assert next(iter(inspect.signature(own).parameters)) == "self", name
    encode = inspect.signature(GenerativeEmbedder.encode)
    st_keywords = ("prompt_name", "prompt", "batch_size", "show_progress_bar", "precision", "convert_to_numpy")
    st_keywords += ("convert_to_tensor", "device", "normalize_embeddings", "truncate_dim")
    assert list(encode.parameters)[:12] == ["self", "texts", *st_keywords]
    named = [p for name, p in encode.parameters.items() if name != "self" and p.kind != p.VAR_KEYWORD]
    assert len(named) <= 14
    text = pydoc.render_doc(GenerativeEmbedder.encode, renderer=pydoc.plaintext)
    assert "encode(self, texts" in text and "Embed texts." in text and "normalize_embeddings: L2-normalize" in text


def test_sentence_transformers_keywords_reach_the_collaborator(tiny_model):
    got = tiny_model.encode(TEXTS, prompt_name="query", normalize_embeddings=False, convert_to_tensor=True)
    direct = Encoding().encode(tiny_model, TEXTS, prompt_name="query", normalize_embeddings=False)
    assert tuple(got.shape) == (3, tiny_model.dim)
    np.testing.assert_array_equal(got.numpy(), direct)
    np.testing.assert_array_equal(tiny_model.encode_query(TEXTS), tiny_model.encode(TEXTS, prompt_name="query"))
    assert tiny_model.get_sentence_embedding_dimension() == tiny_model.dim


def _reaches(start: object, target: object, depth: int = 3) -> bool:
    """Whether ``target`` is reachable from ``start`` in at most ``depth`` references (gc's referents)."""
    seen, frontier = {id(start)}, [start]
    for _ in range(depth):
        frontier = [r for obj in frontier for r in gc.get_referents(obj) if id(r) not in seen and not seen.add(id(r))]
        if any(obj is target for obj in frontier):
            return True
    return False


def test_with_settings_gives_a_model_whose_collaborators_hold_no_model(tiny_model):
    before = tiny_model.encode(TEXTS)
    changed = tiny_model.with_settings(method="mean")
    for model in (tiny_model, changed):
        for collaborator in (model._encoding, model._generation, model._persistence):
            assert not _reaches(collaborator, tiny_model) and not _reaches(collaborator, changed)
    assert changed.backbone is tiny_model.backbone  # the same weights
    np.testing.assert_array_equal(changed.encode(TEXTS), tiny_model.encode(TEXTS, method="mean"))
    np.testing.assert_array_equal(tiny_model.encode(TEXTS), before)  # the first model is unchanged
    assert not np.allclose(changed.encode(TEXTS), before)
    changed.generation_adapter = "adapter"  # a model's own choice, not its copy's
    assert (tiny_model.generation_adapter, changed.generation_adapter) == ("base", "adapter")


def test_a_collaborator_may_be_replaced_per_model(tiny_model):
    class Counting(Encoding):
        calls = 0

        def encode(self, model, texts, **kwargs):
            Counting.calls += 1
            return super().encode(model, texts, **kwargs)

    tiny_model._encoding = Counting()
    tiny_model.encode_query(TEXTS)  # encode_query calls the model's encode, so through the replacement
    assert Counting.calls == 1 and type(tiny_model.with_settings(steps=2)._encoding) is Counting


def test_warnings_name_the_callers_line(tiny_model):
    tiny_model.adapter = "gircse-lora"
    tiny_model.trained_for = TrainedFor("gircse", "causal", False, "training_config.yaml")
    with pytest.warns(UntrainedAdapterWarning) as untrained:
        tiny_model.encode(TEXTS, method="mean")
    prompts = tiny_model.embed_settings().tokenize(tiny_model.backbone.tokenizer, TEXTS, "")
    with warnings.catch_warnings(record=True) as deprecated:
        warnings.simplefilter("always")
        tiny_model.encode(TEXTS, prompts=prompts)
    with pytest.warns(BaseWeightsWarning) as base:  # an embedding-only adapter: the base weights reply
        tiny_model.generate("hi", max_new_tokens=1)
    for caught in (untrained[0], *deprecated, base[0]):
        assert caught.filename == __file__, (caught.category, caught.filename)
