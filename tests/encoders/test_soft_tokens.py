from __future__ import annotations

import pytest
import torch

from genembed.encoders import collate, encode_prompts, generate_soft_tokens


def _batch(backbone, texts, fmt="chat"):
    prompts = encode_prompts(
        backbone.tokenizer, texts, instruction="Retrieve semantically similar text.", prompt_format=fmt
    )
    return collate(prompts, backbone.tokenizer.pad_token_id)


def test_kv_cached_path_equals_full_recompute(tiny):
    batch = _batch(tiny, ["a short one", "a much longer text that needs left padding in its batch"])
    with torch.no_grad():
        cached = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=4, top=5)
        full = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=4, use_cache=False, top=5)
    assert cached.hidden.shape == (2, 4, tiny.model.config.hidden_size)
    assert (cached.hidden - full.hidden).abs().max() < 1e-4
    assert torch.equal(cached.top_ids, full.top_ids)


def test_gradients_flow_through_cached_soft_tokens_and_match_recompute(tiny):
    batch = _batch(tiny, ["gradient check", "another text for the batch"])
    grads = []
    for use_cache in (True, False):
        tiny.model.zero_grad()
        out = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=3, use_cache=use_cache)
        out.hidden.pow(2).mean().backward()
        grads.append(tiny.model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_exactly_k_lm_head_projections(tiny):
    calls = []
    handle = tiny.model.lm_head.register_forward_hook(lambda m, i, o: calls.append(o.shape))
    batch = _batch(tiny, ["count the head calls"])
    with torch.no_grad():
        generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=5)
    handle.remove()
    assert len(calls) == 5
    assert all(shape == (1, tiny.model.config.vocab_size) for shape in calls)  # last position only


def test_soft_token_is_probability_weighted_embedding(tiny):
    batch = _batch(tiny, ["what is fed back"])
    fed = []
    handle = tiny.model.model.register_forward_pre_hook(
        lambda m, args, kwargs: fed.append(kwargs["inputs_embeds"]), with_kwargs=True
    )
    with torch.no_grad():
        generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=2, tau=0.7)
    handle.remove()
    prefill = fed[0]
    with torch.no_grad():
        out = tiny.model.model(inputs_embeds=prefill, attention_mask=batch.attention_mask)
        probs = torch.softmax(tiny.model.lm_head(out.last_hidden_state[:, -1]) / 0.7, dim=-1)
        expected = probs @ tiny.model.model.embed_tokens.weight
    torch.testing.assert_close(fed[1][:, 0], expected, atol=1e-5, rtol=1e-5)


def test_tau_changes_the_result(tiny):
    batch = _batch(tiny, ["temperature matters"])
    with torch.no_grad():
        a = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=3, tau=1.0).hidden
        b = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=3, tau=0.2).hidden
    assert torch.allclose(a[:, 0], b[:, 0]) is False


def test_adaptive_stopping_freezes_the_running_mean(tiny):
    batch = _batch(tiny, ["adaptive steps", "another adaptive example text"])
    with torch.no_grad():
        fixed = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=8)
        auto = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=8, stop_tol=0.99)
    z_fixed = fixed.hidden.cumsum(1) / torch.arange(1, 9)[None, :, None]
    z_auto = auto.hidden.cumsum(1) / torch.arange(1, 9)[None, :, None]
    for row in range(2):
        k = int(auto.steps_used[row])
        assert 2 <= k <= 8
        # up to its stop the adaptive run equals the fixed run; after it z stays frozen
        torch.testing.assert_close(z_auto[row, :k], z_fixed[row, :k], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(z_auto[row, -1], z_fixed[row, k - 1], atol=1e-5, rtol=1e-5)
        if k > 2:
            cos = torch.cosine_similarity(z_fixed[row, k - 2], z_fixed[row, k - 3], dim=0)
            assert cos <= 0.99
        assert torch.cosine_similarity(z_fixed[row, k - 1], z_fixed[row, k - 2], dim=0) > 0.99


def test_adaptive_stopping_fires_in_bfloat16_where_it_does_in_float32(tiny):
    """The default rule (EmbedSettings.stop_tol) once never fired in bfloat16 (dtype="auto" on a CPU with
    native bf16): the running means and their cosine were bf16. The rule now runs in float32."""
    from genembed.encoders.settings import EmbedSettings

    tol = EmbedSettings().stop_tol
    batch = _batch(tiny, ["adaptive steps", "another adaptive example text", "a third, somewhat longer one"])
    used = {}
    for dtype in (torch.float32, torch.bfloat16):
        tiny.model.to(dtype)
        with torch.no_grad():
            out = generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, steps=20, stop_tol=tol)
        used[dtype] = out.steps_used.tolist()
        assert out.hidden.dtype == dtype
    assert max(used[torch.float32]) < 20  # the tiny model's trajectories settle within 20 steps
    assert max(used[torch.bfloat16]) < 20, used  # was [20, 20, 20]
    assert all(abs(a - b) <= 2 for a, b in zip(used[torch.float32], used[torch.bfloat16], strict=True)), used


@pytest.mark.parametrize("bad", [{"steps": 0}, {"steps": 2, "tau": 0.0}])
def test_bad_arguments(tiny, bad):
    batch = _batch(tiny, ["x"])
    with pytest.raises(ValueError):
        generate_soft_tokens(tiny.model, batch.input_ids, batch.attention_mask, **bad)
