from __future__ import annotations

import pytest
import torch

from genembed.retrieval.kv_ops import build_cache, cache_layers, encode_segment, shift_keys
from genembed.retrieval.kv_store import KVGeometry, kv_bytes_per_token


def _smollm2_like_rotary():
    """SmolLM2-135M's RoPE: head_dim 64, rope_theta 100000 (no weights needed)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=576, num_attention_heads=9, head_dim=64, rope_theta=100000.0)
    return LlamaRotaryEmbedding(config)


class _Stack(torch.nn.Module):
    def __init__(self, rotary):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.rotary_emb = rotary


@pytest.mark.parametrize(("start", "delta"), [(0, 1), (0, 250), (7, 4000), (300, -300)])
def test_shifted_keys_equal_keys_computed_at_the_new_positions(start, delta):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rotary = _smollm2_like_rotary()
    raw = torch.randn(1, 3, 12, 64)  # (B, kv_heads, L, head_dim) before RoPE
    here = torch.arange(start, start + 12)[None]
    there = here + delta
    cos, sin = rotary(raw, here)
    _, keys_here = apply_rotary_pos_emb(raw, raw, cos, sin)
    cos, sin = rotary(raw, there)
    _, keys_there = apply_rotary_pos_emb(raw, raw, cos, sin)
    shifted = shift_keys(_Stack(rotary), keys_here, delta)
    # float32 angles at positions ~4000 carry ~1e-4 rad of rounding either way
    torch.testing.assert_close(shifted, keys_there, atol=5e-4 if abs(delta) + start > 1000 else 3e-5, rtol=1e-4)
    assert not torch.allclose(keys_here, keys_there, atol=1e-2)  # the shift really moved them


@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
def test_a_segment_encoded_at_an_offset_is_the_shifted_segment(tiny, attention):
    ids = tiny.tokenizer("Paris is the capital of France.", add_special_tokens=False)["input_ids"]
    keys0, values0 = encode_segment(tiny.model, ids, attention=attention, offset=0)
    keys9, values9 = encode_segment(tiny.model, ids, attention=attention, offset=37)
    assert keys0.shape == (2, 2, len(ids), 8)  # (layers, kv_heads, L, head_dim) of the tiny model
    torch.testing.assert_close(values9, values0, atol=1e-5, rtol=1e-4)  # relative positions only
    torch.testing.assert_close(shift_keys(tiny.model, keys0, 37), keys9, atol=1e-5, rtol=1e-4)


def test_build_cache_concatenates_segments(tiny):
    a = encode_segment(tiny.model, [5, 6, 7], attention="causal")
    b = encode_segment(tiny.model, [8, 9], attention="causal")
    cache = build_cache([a, b], dtype=torch.float32)
    assert cache.get_seq_length() == 5
    keys, values = cache_layers(cache)[1]
    torch.testing.assert_close(keys[0], torch.cat([a[0][1], b[0][1]], dim=1))
    torch.testing.assert_close(values[0], torch.cat([a[1][1], b[1][1]], dim=1))


def test_kv_bytes_per_token():
    smollm2 = KVGeometry(layers=30, kv_heads=3, head_dim=64)
    assert smollm2.bytes_per_token("float32") == 2 * 30 * 3 * 64 * 4 == 46_080
    assert smollm2.bytes_per_token("fp16") == smollm2.bytes_per_token("bfloat16") == 23_040
    assert kv_bytes_per_token(32, 8, 128, "bf16") == 131_072  # Mistral-7B / GritLM-7B
    with pytest.raises(ValueError, match="KV dtype"):
        kv_bytes_per_token(1, 1, 1, "int8")


def test_geometry_from_a_model_config(tiny):
    assert KVGeometry.of(tiny.model.config) == KVGeometry(layers=2, kv_heads=2, head_dim=8)
