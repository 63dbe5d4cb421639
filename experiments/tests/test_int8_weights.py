from __future__ import annotations

import warnings

import pytest
import torch
from int8_weights import FLOAT32_PROJECTIONS, Int8Linear, quantize_int8

from genembed.encoders import EmbedSettings, encode_texts

warnings.filterwarnings("ignore", message=".*quantize_per_.*deprecated", category=UserWarning)
TEXTS = ["a short one", "a much longer text that needs left padding in its batch", "x"]


def test_an_int8_linear_is_close_to_its_float_linear():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    q = Int8Linear(linear)
    x = torch.randn(3, 5, 64)
    want = linear(x)
    got = q(x)
    assert got.shape == want.shape == (3, 5, 48)
    assert ((got - want).norm() / want.norm()) < 0.03
    assert q.weight_int8.dtype == torch.int8 and set(q.state_dict()) == {"weight_int8", "weight_scale"}


def test_the_decoder_projections_are_quantized_but_down_proj_and_the_head(tiny):
    n = quantize_int8(tiny.model)
    layers = tiny.model.model.layers
    assert n == len(layers) * 6
    for layer in layers:
        assert isinstance(layer.self_attn.q_proj, Int8Linear) and isinstance(layer.mlp.up_proj, Int8Linear)
        assert type(layer.mlp.down_proj) is torch.nn.Linear and "down_proj" in FLOAT32_PROJECTIONS
    assert type(tiny.model.lm_head) is torch.nn.Linear


def test_int8_embeddings_stay_close_on_both_paths(tiny):
    settings = EmbedSettings.build(steps=3)
    ref, _ = encode_texts(tiny, TEXTS, settings, instruction="Find it.")
    quantize_int8(tiny.model)
    for fields in ({}, {"fast_path": False}):
        got, _ = encode_texts(tiny, TEXTS, settings.replace(**fields), instruction="Find it.")
        cos = torch.cosine_similarity(got, ref, dim=-1)
        assert cos.min() > 0.99 and (got - ref).abs().max() > 0  # quantized, and close


def test_a_lora_adapter_stays_float_and_can_be_switched_off(tiny):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny.model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "up_proj"]))
    quantize_int8(model)
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj.base_layer, Int8Linear)
    assert type(q_proj.lora_A["default"]) is torch.nn.Linear
    x = torch.randn(2, tiny.model.config.hidden_size)
    with torch.no_grad():
        q_proj.lora_B["default"].weight.normal_(0.0, 0.5)
        on = q_proj(x)
        with model.disable_adapter():
            off = q_proj(x)
    torch.testing.assert_close(off, q_proj.base_layer(x))
    assert (on - off).abs().max() > 1e-2


def test_only_float32_models_on_the_cpu(tiny):
    tiny.model.to(torch.bfloat16)
    with pytest.raises(ValueError, match="float32 model on the CPU"):
        quantize_int8(tiny.model)
