from __future__ import annotations

import pytest
import torch

from genembed.backbone import position_ids_from_mask, run_decoder


def _tiny_decoder(arch: str):
    import transformers

    common = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    torch.manual_seed(0)
    return model_cls(config_cls(**common)).eval()


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
def test_bidirectional_attention_is_real_and_causal_is_causal(arch):
    model = _tiny_decoder(arch)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    changed = ids.clone()
    changed[0, -1] = 42
    mask = torch.ones_like(ids)
    with torch.no_grad():
        h = {
            (att, which): run_decoder(model, input_ids=x, attention_mask=mask, attention=att).last_hidden_state
            for att in ("causal", "bidirectional")
            for which, x in (("orig", ids), ("changed", changed))
        }
    # causal: token 0 cannot see the last token
    assert torch.equal(h["causal", "orig"][0, 0], h["causal", "changed"][0, 0])
    # bidirectional: it can, so its hidden state moves
    assert (h["bidirectional", "orig"][0, 0] - h["bidirectional", "changed"][0, 0]).abs().max() > 1e-3
    # and bidirectional differs from causal at token 0 on the same input
    assert (h["bidirectional", "orig"][0, 0] - h["causal", "orig"][0, 0]).abs().max() > 1e-3


def test_bad_attention_name():
    model = _tiny_decoder("llama")
    with pytest.raises(ValueError, match="attention must be 'causal' or 'bidirectional'"):
        run_decoder(model, input_ids=torch.tensor([[1, 2]]), attention_mask=torch.ones(1, 2), attention="sideways")


def test_position_ids_ignore_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert position_ids_from_mask(mask, offset=3)[0].tolist() == [3, 3, 3, 4, 5]


@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
def test_left_padding_does_not_change_hidden_states(tiny, attention):
    ids = torch.tensor([[10, 11, 12]])
    padded = torch.tensor([[2, 2, 10, 11, 12]])
    with torch.no_grad():
        alone = run_decoder(tiny.model, input_ids=ids, attention_mask=torch.ones_like(ids), attention=attention)
        mask = torch.tensor([[0, 0, 1, 1, 1]])
        pad = run_decoder(tiny.model, input_ids=padded, attention_mask=mask, attention=attention)
    torch.testing.assert_close(pad.last_hidden_state[0, 2:], alone.last_hidden_state[0], atol=1e-5, rtol=1e-5)
