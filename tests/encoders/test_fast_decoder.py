from __future__ import annotations

import copy

import pytest
import torch

from genembed.backbone import Backbone
from genembed.encoders import EmbedSettings, RunOptions, collate, encode_prompts, encode_texts
from genembed.encoders import fast_decoder as fast_mod
from genembed.encoders.fast_decoder import FastDecoder, right_pad

TEXTS = [
    "a short one",
    "a much longer text that needs left padding in its batch, and then some more words",
    "x",
    "",
    "The quick brown fox jumps over the lazy dog.",
]
SETTINGS = [
    {"method": "mean"},
    {"method": "mean", "attention": "bidirectional"},
    {"method": "last"},
    {"method": "grit"},
    {"method": "gircse", "steps": 3},
    {"method": "gircse", "steps": 4, "attention": "bidirectional"},
    {"method": "gircse", "steps": "auto", "max_steps": 6, "stop_tol": 0.98},
]


def _other_architecture(tiny: Backbone, arch: str) -> Backbone:
    """A random tiny model of another supported architecture, sharing the tiny tokenizer."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = tiny.tokenizer
    common = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(1)
    if arch == "qwen2":  # q/k/v projections with biases
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=None))
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(3.0)
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
    return Backbone(model=model.eval(), tokenizer=tok, name=f"tiny-{arch}")


def _both_paths(backbone: Backbone, settings: dict, **fields) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The fast path (cached prefixes unless ``fields`` say otherwise) and the reference: the transformers
    path on whole prompts."""
    embed = EmbedSettings.build(**settings)
    run = RunOptions(batch_size=3, batch_tokens=0)
    fast, steps_fast = encode_texts(backbone, TEXTS, embed, run=run.replace(**fields), instruction="Retrieve it.")
    reference = run.replace(fast_path=False, cache_prefix=False)
    ref, steps_ref = encode_texts(backbone, TEXTS, embed, run=reference, instruction="Retrieve it.")
    if steps_fast is not None:
        assert torch.equal(steps_fast, steps_ref)
    return fast, ref, steps_fast


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_fast_path_equals_the_transformers_path(tiny, arch, settings, monkeypatch):
    backbone = tiny if arch == "llama" else _other_architecture(tiny, arch)
    prefixes = []
    original = FastDecoder.prefill
    monkeypatch.setattr(
        FastDecoder, "prefill", lambda self, *a, **k: prefixes.append(k.get("prefix")) or original(self, *a, **k)
    )
    causal = EmbedSettings.build(**settings).attention == "causal"
    for cached in (True, False):
        prefixes.clear()
        fast, ref, _ = _both_paths(backbone, settings, cache_prefix=cached)
        # five texts in batches of three; with cached prefixes the empty text runs whole, beside its batch
        assert len(prefixes) == (3 if cached and causal else 2)
        assert any(p is not None for p in prefixes) == (cached and causal)
        assert ref.abs().max() > 0.1
        torch.testing.assert_close(fast, ref, atol=2e-5, rtol=1e-5)
    slow_cached, _ = encode_texts(
        backbone,
        TEXTS,
        EmbedSettings.build(**settings),
        run=RunOptions(batch_size=3, batch_tokens=0, fast_path=False),
        instruction="Retrieve it.",
    )  # the transformers path after cached prefixes
    torch.testing.assert_close(slow_cached, ref, atol=2e-5, rtol=1e-5)


def test_adaptive_steps_really_vary_and_match(tiny):
    _, _, steps = _both_paths(tiny, {"method": "gircse", "steps": "auto", "max_steps": 8, "stop_tol": 0.995})
    assert steps is not None and len(set(steps.tolist())) > 1


def test_lora_layers_run_as_merged_linears_kept_until_a_weight_changes(tiny, monkeypatch):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora.layer import Linear as LoraLinear

    model = get_peft_model(
        tiny.model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    adapted = Backbone(model=model.eval(), tokenizer=tiny.tokenizer, name="tiny+lora")
    merges = []
    delta = LoraLinear.get_delta_weight
    monkeypatch.setattr(LoraLinear, "get_delta_weight", lambda self, name: merges.append(name) or delta(self, name))
    for settings in ({"method": "mean"}, {"method": "gircse", "steps": 3}):
        fast, ref, _ = _both_paths(adapted, settings)
        torch.testing.assert_close(fast, ref, atol=2e-5, rtol=1e-5)
        with model.disable_adapter():
            base, _ = encode_texts(adapted, TEXTS, EmbedSettings.build(**settings))
            base_ref, _ = encode_texts(adapted, TEXTS, EmbedSettings.build(**settings), run=RunOptions(fast_path=False))
        torch.testing.assert_close(base, base_ref, atol=2e-5, rtol=1e-5)
        assert (base - fast).abs().max() > 1e-2  # the adapter was applied
    lora_layers = 4 * len(model.base_model.model.model.layers)
    assert len(merges) == lora_layers  # merged once, reused by every later call

    with torch.no_grad():  # an optimizer step changes lora_B in place: the merge must be redone
        model.base_model.model.model.layers[0].mlp.up_proj.lora_B["default"].weight.add_(0.5)
    fast, ref, _ = _both_paths(adapted, {"method": "mean"})
    torch.testing.assert_close(fast, ref, atol=2e-5, rtol=1e-5)
    assert len(merges) == lora_layers + 1


@pytest.mark.skipif(not fast_mod._onednn_bf16(), reason="this CPU has no oneDNN bfloat16 kernels")
def test_bfloat16_fast_path_is_close_to_the_transformers_path(tiny):
    tiny.model.to(torch.bfloat16)
    for settings in ({"method": "mean"}, {"method": "gircse", "steps": 3}):
        fast, ref, _ = _both_paths(tiny, settings)
        assert torch.cosine_similarity(fast, ref, dim=-1).min() > 0.999


def test_not_used_with_gradients_when_disabled_or_unsupported(tiny, monkeypatch):
    with torch.no_grad():
        assert FastDecoder.build(tiny.model) is not None
    assert FastDecoder.build(tiny.model) is None  # gradients on: training keeps the transformers path
    with torch.no_grad():
        monkeypatch.setenv("GENEMBED_FAST_PATH", "0")
        assert FastDecoder.build(tiny.model) is None
        monkeypatch.delenv("GENEMBED_FAST_PATH")
        other = copy.deepcopy(tiny.model)
        other.config.model_type = "gemma"
        assert fast_mod._unsupported_reason(other) == "architecture 'gemma' is not one of ('llama', 'mistral', 'qwen2')"
        assert FastDecoder.build(other) is None
        other.config.model_type, other.config.hidden_act = "llama", "gelu"
        assert fast_mod._unsupported_reason(other) == "activation 'gelu' is not silu"


def test_bfloat16_on_a_cpu_without_onednn_bf16_takes_the_transformers_path(tiny, monkeypatch):
    monkeypatch.setattr(fast_mod, "_onednn_bf16", lambda: False)
    tiny.model.to(torch.bfloat16)
    with torch.no_grad():
        assert fast_mod._unsupported_reason(tiny.model) == (
            "bfloat16 weights on a CPU without oneDNN bfloat16 kernels (no AVX512-BF16 / AMX)"
        )
        assert FastDecoder.build(tiny.model) is None
    tiny.model.to(torch.float32)
    with torch.no_grad():
        assert fast_mod._unsupported_reason(tiny.model) is None


def test_right_pad_rolls_rows_alike():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 1]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    other = torch.tensor([[0, 0, 0, 1], [0, 1, 1, 0]])
    rolled, lengths, rolled_other = right_pad(ids, mask, other)
    assert rolled.tolist() == [[5, 6, 0, 0], [7, 8, 9, 1]]
    assert lengths.tolist() == [2, 4]
    assert rolled_other.tolist() == [[0, 1, 0, 0], [0, 1, 1, 0]]


def test_the_kv_cache_has_room_for_exactly_the_steps_asked(tiny):
    prompts = encode_prompts(tiny.tokenizer, ["room"], prompt_format="chat")
    batch = collate(prompts, tiny.tokenizer.pad_token_id)
    with torch.inference_mode():
        decoder = FastDecoder.build(tiny.model)
        ids, lengths = right_pad(batch.input_ids, batch.attention_mask)
        _, cache = decoder.prefill(ids, lengths, cache_steps=1)
        d = torch.zeros(1, tiny.model.config.hidden_size)
        decoder.step(d, cache)
        with pytest.raises(ValueError, match="room for 1 soft tokens"):
            decoder.step(d, cache)


@pytest.mark.slow
def test_fast_path_equals_the_transformers_path_on_the_default_model(real_model, monkeypatch):
    texts = ["A man is playing a guitar.", "Photosynthesis turns light into sugar in the leaves of plants.", "ok"]
    for settings in ({"method": "mean"}, {"method": "gircse", "steps": 5}, {"method": "grit"}):
        fast = real_model.encode(texts, instruction="Retrieve semantically similar text.", **settings)
        monkeypatch.setenv("GENEMBED_FAST_PATH", "0")
        ref = real_model.encode(texts, instruction="Retrieve semantically similar text.", **settings)
        monkeypatch.delenv("GENEMBED_FAST_PATH")
        assert (fast * ref).sum(axis=1).min() > 0.99999, settings


def test_used_only_on_the_cpu(tiny):
    with torch.no_grad():
        assert FastDecoder.build(tiny.model) is not None
        tiny.model.to("meta")  # any device other than the CPU
        assert fast_mod._unsupported_reason(tiny.model) == "device meta is not the CPU"
        assert FastDecoder.build(tiny.model) is None


def test_a_prefill_in_row_chunks_fills_the_same_cache(tiny):
    prompts = encode_prompts(tiny.tokenizer, TEXTS, instruction="Retrieve it.", prompt_format="chat")
    batch = collate(prompts, tiny.tokenizer.pad_token_id)
    with torch.inference_mode():
        decoder = FastDecoder.build(tiny.model)
        ids, lengths = right_pad(batch.input_ids, batch.attention_mask)
        whole, cache = decoder.prefill(ids, lengths, cache_steps=2)
        chunked, chunks = decoder.prefill(ids, lengths, cache_steps=2, chunk_tokens=2 * ids.shape[1])  # 2 rows
        torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-5)
        width = cache.prompt_width
        for a, b in zip(cache.keys + cache.values, chunks.keys + chunks.values, strict=True):
            torch.testing.assert_close(b[:, :, :width], a[:, :, :width], atol=1e-6, rtol=1e-5)
        d = torch.randn(len(TEXTS), tiny.model.config.hidden_size)
        torch.testing.assert_close(decoder.step(d, chunks), decoder.step(d, cache), atol=1e-6, rtol=1e-5)
