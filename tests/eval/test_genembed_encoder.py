"""GenembedEncoder on the tiny model: one sweep run equals separate runs, cache keys, end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.eval import EmbeddingCache, GenembedEncoder, evaluate, parse_steps
from genembed.model import GenerativeEmbedder

TEXTS = ["The quick brown fox.", "A man is playing a guitar.", "Paris is the capital of France.", "x"]


def test_parse_steps():
    assert parse_steps("10, 1,3,3") == (1, 3, 10)
    assert parse_steps(5) == (5,)
    assert parse_steps([20, 5]) == (5, 20)
    for bad in ("1,a", "0", []):
        with pytest.raises(ValueError, match="steps must be"):
            parse_steps(bad)


def test_one_sweep_run_equals_separate_runs(tiny_model):
    encoder = GenembedEncoder(tiny_model, steps="1,3,4")
    views = encoder.encode_views(TEXTS, instruction="Retrieve semantically similar text.")
    assert views.shape == (4, 3, tiny_model.dim)
    for j, k in enumerate((1, 3, 4)):
        alone = tiny_model.encode(TEXTS, instruction="Retrieve semantically similar text.", steps=k)
        np.testing.assert_allclose(views[:, j], alone, atol=1e-5)
    np.testing.assert_allclose(encoder.encode(TEXTS, instruction=""), tiny_model.encode(TEXTS, steps=4), atol=1e-6)


def test_single_pass_methods_take_no_steps(tiny_model):
    encoder = GenembedEncoder(tiny_model, method="mean", prompt_format="plain")
    assert encoder.views == ()
    np.testing.assert_allclose(
        encoder.encode(TEXTS, instruction="i"), tiny_model.encode(TEXTS, instruction="i", method="mean"), atol=1e-6
    )
    with pytest.raises(ValueError, match="steps apply only to method 'gircse'"):
        GenembedEncoder(tiny_model, method="mean", steps=3)
    with pytest.raises(ValueError, match="attention must be"):
        GenembedEncoder(tiny_model, attention="sideways")


def test_cache_key_covers_weights_and_settings(tiny, tiny_model):
    base = GenembedEncoder(tiny_model, steps=[1, 5])
    assert base.cache_key == GenembedEncoder(tiny_model, steps=[1, 5]).cache_key
    assert base.cache_key == GenembedEncoder(tiny_model, steps=[5, 20]).cache_key  # K is a per-row key part
    for settings in (
        {"prompt_format": "plain"},
        {"max_length": 64},
        {"method": "mean"},
        {"attention": "bidirectional"},
    ):
        assert GenembedEncoder(tiny_model, **settings).cache_key != base.cache_key, settings
    changed = GenerativeEmbedder(tiny)
    with torch.no_grad():
        next(changed.backbone.model.parameters())[0, 0] += 1.0
    assert GenembedEncoder(changed).cache_key != base.cache_key
    assert GenembedEncoder(GenerativeEmbedder(tiny, tau=0.5)).cache_key != base.cache_key


def test_cache_key_sees_a_lora_adapter(tiny_model):
    from peft import LoraConfig, get_peft_model

    base_key = GenembedEncoder(tiny_model).cache_key
    tiny_model.backbone.model = get_peft_model(tiny_model.backbone.model, LoraConfig(r=2, target_modules=["q_proj"]))
    one = GenembedEncoder(tiny_model).cache_key
    assert one != base_key
    lora_b = next(p for n, p in tiny_model.backbone.model.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        lora_b.add_(0.5)
    assert GenembedEncoder(tiny_model).cache_key != one


def test_cache_key_ignores_a_generation_adapter(tiny_folder, tmp_path):
    """A generation adapter changes what the model says, not its embeddings: the cache is shared."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    import genembed

    config = LoraConfig(r=2, target_modules=["q_proj", "up_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_folder), config).save_pretrained(tmp_path / "gen")
    config = LoraConfig(r=2, target_modules=["v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_folder), config).save_pretrained(tmp_path / "emb")
    for adapter in (False, tmp_path / "emb"):
        key = GenembedEncoder(genembed.load(tiny_folder, adapter=adapter)).cache_key
        both = genembed.load(tiny_folder, adapter=adapter, generation_adapter=tmp_path / "gen")
        assert GenembedEncoder(both).cache_key == key
    both.backbone.model.load_adapter(str(tmp_path / "gen"), adapter_name="other")  # any other adapter counts
    assert GenembedEncoder(both).cache_key != key


def test_evaluate_end_to_end_with_the_tiny_model(tiny_model, toy_tasks, tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    encoder = GenembedEncoder(tiny_model, steps=[1, 2])
    first = evaluate(encoder, [toy_tasks], cache=cache, out=tmp_path / "r.json", progress=False)
    assert first.views == [1, 2]
    assert all(len(t.scores) == 2 and all(np.isfinite(t.scores)) for t in first.tasks)
    assert first.config["method"] == "gircse" and first.config["steps"] == [1, 2]
    second = evaluate(GenembedEncoder(tiny_model, steps=[2]), [toy_tasks], cache=cache, progress=False)
    assert sum(t.encoding["encoded"] for t in second.tasks) == 0  # K=2 rows of the sweep are reused
    assert [t.scores[0] for t in second.tasks] == [t.scores[1] for t in first.tasks]
    assert (tmp_path / "r_scaling.png").is_file()
