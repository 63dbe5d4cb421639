"""A generation adapter: a second LoRA adapter that chat, reranking and RAG use, beside the embedding one."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from genembed.generation.adapters import GENERATION_ADAPTER, attach_generation_adapter, same_weights
from genembed.model import GenerativeEmbedder
from genembed.retrieval.kv_source import generation_weights

PROMPT = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "I love this movie."]


def _lora_folder(backbone, folder, targets, seed):
    """Save a non-trivial LoRA adapter for ``backbone``'s weights into ``folder``."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=targets, init_lora_weights=False)
    get_peft_model(copy.deepcopy(backbone.model), config).save_pretrained(folder)
    return folder


@pytest.fixture
def folders(chatty, tmp_path):
    """(embedding adapter folder, generation adapter folder): different weights and target modules."""
    embedding = _lora_folder(chatty, tmp_path / "emb-lora", ["q_proj", "v_proj", "down_proj"], seed=0)
    generation = _lora_folder(chatty, tmp_path / "gen-lora", ["k_proj", "v_proj", "up_proj"], seed=1)
    return embedding, generation


def _with(chatty, folder=None, name="lora"):
    """The chatty model with the adapter in ``folder`` as its only (active) adapter."""
    from peft import PeftModel

    backbone = copy.deepcopy(chatty)
    if folder is not None:
        backbone.model = PeftModel.from_pretrained(backbone.model, str(folder)).eval()
    return GenerativeEmbedder(backbone, adapter=name if folder is not None else None)


def _with_generator(chatty, embedding, generation):
    model = _with(chatty, embedding, "emb-lora")
    attach_generation_adapter(model.backbone, generation)
    model.generation_adapter_name, model.generation_adapter_path = "gen-lora", str(generation)
    model.generation_adapter = GENERATION_ADAPTER
    return model


def _scores(model):
    return [r.score for r in model.rerank(PROMPT, DOCS)]


@pytest.mark.parametrize("embeds_with_adapter", [True, False])
def test_generates_with_the_generation_adapter_and_embeds_as_before(chatty, folders, embeds_with_adapter):
    embedding, generation = folders
    alone = _with(chatty, generation)
    alone.generation_adapter = True  # the generation adapter on its own: what the generator should be
    reference = _with(chatty, embedding if embeds_with_adapter else None, "emb-lora")
    if embeds_with_adapter:
        model = _with_generator(chatty, embedding, generation)
    else:  # no embedding adapter: the generation adapter is loaded switched off for embedding
        model = _with(chatty)
        attach_generation_adapter(model.backbone, generation)
        model.generation_adapter_name = "gen-lora"
        model.generation_adapter = GENERATION_ADAPTER
    base = _with(chatty)
    assert model.generate(PROMPT, max_new_tokens=20) == alone.generate(PROMPT, max_new_tokens=20)
    assert model.generate(PROMPT, max_new_tokens=20) != base.generate(PROMPT, max_new_tokens=20)
    assert _scores(model) == pytest.approx(_scores(alone), abs=1e-5)
    assert _scores(model) != pytest.approx(_scores(base), abs=1e-3)
    for method in ("mean", "gircse"):
        np.testing.assert_allclose(
            model.encode(PROMPT, method=method), reference.encode(PROMPT, method=method), atol=1e-6
        )
    # a paused stream leaves the embedding weights in place
    stream = model.generate(PROMPT, max_new_tokens=20, stream=True)
    next(stream)
    np.testing.assert_allclose(model.encode(PROMPT, method="mean"), reference.encode(PROMPT, method="mean"), atol=1e-6)
    assert "".join(stream)
    assert not same_weights(model)
    # False and True still choose the base weights and the embedding adapter
    model.generation_adapter = False
    assert _scores(model) == pytest.approx(_scores(base), abs=1e-5)
    if embeds_with_adapter:
        model.generation_adapter = True
        reference.generation_adapter = True
        assert _scores(model) == pytest.approx(_scores(reference), abs=1e-5)


def test_the_generator_is_named_in_the_kv_record(chatty, folders):
    embedding, generation = folders
    model = _with_generator(chatty, embedding, generation)
    weights = generation_weights(model)
    assert weights["adapter"].startswith("gen-lora@sha256:") and len(weights["adapter"]) == len("gen-lora@sha256:") + 16
    model.generation_adapter = True
    assert generation_weights(model)["adapter"] == "emb-lora"  # no folder recorded for it here
    model.generation_adapter = False
    assert generation_weights(model)["adapter"] == "none"


def test_bad_generation_adapter_values_are_refused(chatty, folders):
    embedding, generation = folders
    model = _with(chatty, embedding)
    with pytest.raises(ValueError, match="with a generation adapter loaded"):
        model.generation_adapter = GENERATION_ADAPTER  # none loaded
    with pytest.raises(TypeError, match="must be a bool"):
        model.generation_adapter = 1
    model = _with_generator(chatty, embedding, generation)
    with pytest.raises(ValueError, match="got 'other'"):
        model.generation_adapter = "other"
    with pytest.raises(ValueError, match="already holds a generation adapter"):
        attach_generation_adapter(model.backbone, generation)


def test_load_attaches_saves_and_restores_it(tiny_folder, folders, tmp_path):
    import genembed

    embedding, generation = folders
    model = genembed.load(tiny_folder, adapter=embedding, generation_adapter=generation)
    assert model.generation_adapter == GENERATION_ADAPTER and model.generation_adapter_name == "gen-lora"
    plain = genembed.load(tiny_folder, adapter=embedding)
    assert plain.generation_adapter == "base"
    np.testing.assert_allclose(model.encode(PROMPT, method="mean"), plain.encode(PROMPT, method="mean"), atol=1e-6)
    scores = _scores(model)
    assert scores != pytest.approx(_scores(plain), abs=1e-3)
    saved = model.save(tmp_path / "saved")
    assert (saved / GENERATION_ADAPTER / "adapter_config.json").is_file()
    again = genembed.load(saved)
    assert again.generation_adapter == GENERATION_ADAPTER and again.generation_adapter_name == "gen-lora"
    assert generation_weights(again) == generation_weights(model)  # same name and digest: stored states stay valid
    assert _scores(again) == pytest.approx(scores, abs=1e-5)
    np.testing.assert_allclose(again.encode(PROMPT, method="mean"), plain.encode(PROMPT, method="mean"), atol=1e-6)
    # saved while generating with the base weights: reloaded the same way, the adapter still held
    again.generation_adapter = False
    off = genembed.load(again.save(tmp_path / "saved-off"))
    assert off.generation_adapter == "base" and off.generation_adapter_name == "gen-lora"
    assert _scores(off) == pytest.approx(_scores(plain), abs=1e-5)
    # an explicit choice wins over the saved one
    assert genembed.load(saved, generation_adapter="base").generation_adapter == "base"
    with pytest.raises(genembed.MissingModelError, match="generation adapter folder .* holds no adapter_config.json"):
        genembed.load(tiny_folder, generation_adapter=tmp_path)
