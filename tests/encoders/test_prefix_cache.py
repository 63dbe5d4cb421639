from __future__ import annotations

import pytest
import torch

from genembed.encoders import EmbedSettings, encode_texts
from genembed.encoders.fast_decoder import FastDecoder
from genembed.encoders.prefix_cache import PrefixCache, compute_prefix_states, prefix_cache, weights_stamp
from genembed.encoders.settings import RunOptions

TEXTS = ["a short one", "a much longer text that needs left padding in its batch", "x", "", "The quick fox."]
ASK = "Retrieve semantically similar text."


def _encode(backbone, instruction=ASK, **fields):
    run = RunOptions(batch_size=2, **{k: fields.pop(k) for k in tuple(fields) if k in RunOptions.__dataclass_fields__})
    settings = EmbedSettings.build(**{"steps": 3, **fields})
    return encode_texts(backbone, TEXTS, settings, run=run, instruction=instruction)[0]


def test_both_paths_compute_the_same_prefix_states(tiny):
    ids = tiny.tokenizer("Retrieve it, please.", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        fast = FastDecoder.build(tiny.model).prefix_states(ids)
        slow = compute_prefix_states(tiny.model, ids)
    assert fast.length == slow.length == len(ids)
    assert fast.keys[0].shape == (1, tiny.model.config.num_key_value_heads, len(ids), fast.keys[0].shape[-1])
    for a, b in zip((*fast.keys, *fast.values), (*slow.keys, *slow.values), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert fast.nbytes == sum(t.numel() * 4 for t in (*fast.keys, *fast.values))


@pytest.mark.parametrize("fast_path", [True, False])
def test_each_instruction_is_computed_once_and_reused(tiny, fast_path):
    cache = prefix_cache(tiny.model)
    first = _encode(tiny, fast_path=fast_path)
    assert (len(cache), cache.misses) == (1, 1)  # three batches, one prefix (the empty text runs whole)
    lookups = cache.hits + cache.misses
    assert lookups >= 2
    again = _encode(tiny, fast_path=fast_path)
    assert (len(cache), cache.misses, cache.hits) == (1, 1, 2 * lookups - 1)
    torch.testing.assert_close(again, first, atol=0, rtol=0)
    _encode(tiny, "Classify the emotion.", fast_path=fast_path)
    assert (len(cache), cache.misses) == (2, 2)


def test_memory_is_bounded_least_recently_used_first(tiny):
    cache = prefix_cache(tiny.model)
    _encode(tiny, "one")
    one = cache.nbytes
    assert one > 0
    cache.max_bytes = 2 * one + one // 2  # room for two such prefixes, not three
    _encode(tiny, "two")
    _encode(tiny, "one")  # used again: now the most recent
    _encode(tiny, "red")  # the third pushes out the least recently used, "two"
    assert len(cache) == 2 and cache.nbytes == 2 * one <= cache.max_bytes  # (three tokens each)
    misses = cache.misses
    _encode(tiny, "one")
    assert cache.misses == misses
    _encode(tiny, "two")
    assert cache.misses == misses + 1
    cache.max_bytes = 0  # keeps nothing, still embeds
    assert len(cache) == 0 and cache.nbytes == 0
    torch.testing.assert_close(_encode(tiny, "one"), _encode(tiny, "one", cache_prefix=False), atol=2e-6, rtol=1e-5)
    assert len(cache) == 0
    with pytest.raises(ValueError, match="prefix cache size"):
        cache.max_bytes = -1


def test_a_weight_change_empties_the_cache(tiny):
    cache = prefix_cache(tiny.model)
    before = _encode(tiny)
    assert len(cache) == 1
    with torch.no_grad():  # an optimizer step changes weights in place
        tiny.model.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
    after = _encode(tiny)
    assert cache.misses == 2
    torch.testing.assert_close(after, _encode(tiny, cache_prefix=False), atol=2e-6, rtol=1e-5)
    assert (after - before).abs().max() > 1e-3


def test_turning_a_lora_adapter_off_is_a_weight_change(tiny):
    from peft import LoraConfig, get_peft_model

    from genembed.backbone import Backbone

    model = get_peft_model(tiny.model, LoraConfig(r=4, lora_alpha=8, target_modules=["k_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    adapted = Backbone(model=model.eval(), tokenizer=tiny.tokenizer, name="tiny+lora")
    stamp = weights_stamp(model)
    on = _encode(adapted)
    with model.disable_adapter():
        assert weights_stamp(model) != stamp
        off = _encode(adapted)
        torch.testing.assert_close(off, _encode(adapted, cache_prefix=False), atol=2e-6, rtol=1e-5)
    assert weights_stamp(model) == stamp
    assert (on - off).abs().max() > 1e-3
    torch.testing.assert_close(_encode(adapted), on, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "fields",
    [{"method": "grit"}, {"attention": "bidirectional"}, {"use_cache": False}, {"cache_prefix": False}],
    ids=["grit", "bidirectional", "recompute", "off"],
)
def test_not_used_where_it_does_not_apply(tiny, fields):
    _encode(tiny, **fields)
    assert len(prefix_cache(tiny.model)) == 0 and prefix_cache(tiny.model).misses == 0


def test_not_used_with_gradients(tiny, monkeypatch):
    from genembed.encoders import embedder

    monkeypatch.setattr(torch, "is_grad_enabled", lambda: True)
    assert embedder._prefix_lookup(tiny.model, EmbedSettings(), RunOptions(), None) is None
    monkeypatch.undo()
    monkeypatch.setenv("GENEMBED_PREFIX_CACHE", "0")
    assert embedder._prefix_lookup(tiny.model, EmbedSettings(), RunOptions(), None) is None


def test_an_entry_larger_than_the_cache_is_used_but_not_kept(tiny):
    cache = PrefixCache(max_bytes=10)
    lookup = cache.lookup(tiny.model, "transformers", lambda ids: compute_prefix_states(tiny.model, ids))
    with torch.inference_mode():
        states = lookup((1, 2, 3))
    assert states.length == 3 and len(cache) == 0 and cache.misses == 1
