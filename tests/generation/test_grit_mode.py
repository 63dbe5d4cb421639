"""GRIT's embedding mode: bidirectional attention, mean over the text tokens only."""

from __future__ import annotations

import numpy as np
import torch

from genembed.backbone.attention import run_decoder
from genembed.encoders.prompts import encode_prompts

TEXT = "The quick brown fox jumps over the lazy dog."
INSTRUCTION = "Retrieve semantically similar text."


def _perturb_final_hidden(model, positions: slice):
    """Add a large offset to the final hidden states at ``positions`` (after the last layer, so the
    change reaches the embedding only if those positions are pooled)."""

    def hook(_module, _inputs, output):
        output = output.clone()
        output[:, positions] += 10.0
        return output

    return model.model.norm.register_forward_hook(hook)


def test_grit_is_bidirectional_mean_over_text_tokens(tiny_model):
    tok, model = tiny_model.backbone.tokenizer, tiny_model.backbone.model
    (prompt,) = encode_prompts(tok, [TEXT], instruction=INSTRUCTION, prompt_format="plain")
    ids = torch.tensor([prompt.ids])
    hidden = run_decoder(model, input_ids=ids, attention_mask=torch.ones_like(ids), attention="bidirectional")
    expected = hidden.last_hidden_state[0, prompt.text_start : prompt.text_end].mean(0)
    got = tiny_model.encode(TEXT, method="grit", instruction=INSTRUCTION, normalize=False, convert_to_numpy=False)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    everything = hidden.last_hidden_state[0].mean(0)
    assert not torch.allclose(got, everything, atol=1e-3)


def test_instruction_hidden_states_are_not_pooled(tiny_model, monkeypatch):
    monkeypatch.setenv("GENEMBED_FAST_PATH", "0")  # the hook sits on the transformers modules
    tok, model = tiny_model.backbone.tokenizer, tiny_model.backbone.model
    (prompt,) = encode_prompts(tok, [TEXT], instruction=INSTRUCTION, prompt_format="plain")
    base = tiny_model.encode(TEXT, method="grit", instruction=INSTRUCTION)
    handle = _perturb_final_hidden(model, slice(0, prompt.text_start))
    try:
        perturbed_instruction = tiny_model.encode(TEXT, method="grit", instruction=INSTRUCTION)
    finally:
        handle.remove()
    np.testing.assert_allclose(perturbed_instruction, base, atol=1e-6)
    handle = _perturb_final_hidden(model, slice(prompt.text_start, prompt.text_start + 1))
    try:
        perturbed_text = tiny_model.encode(TEXT, method="grit", instruction=INSTRUCTION)
    finally:
        handle.remove()
    assert float(perturbed_text @ base) < 0.99  # the same perturbation on a text token does show


def test_instruction_changes_the_embedding_through_attention(tiny_model):
    a = tiny_model.encode(TEXT, method="grit", instruction=INSTRUCTION)
    b = tiny_model.encode(TEXT, method="grit", instruction="Classify the emotion expressed in the given text.")
    none = tiny_model.encode(TEXT, method="grit")
    assert float(a @ b) < 0.9999 and float(a @ none) < 0.9999


def test_queries_get_an_instruction_documents_none(tiny_model):
    from genembed.model import DEFAULT_QUERY_INSTRUCTION

    query = tiny_model.encode_query(TEXT, method="grit")
    np.testing.assert_allclose(query, tiny_model.encode(TEXT, method="grit", instruction=DEFAULT_QUERY_INSTRUCTION))
    document = tiny_model.encode_document(TEXT, method="grit")
    np.testing.assert_allclose(document, tiny_model.encode(TEXT, method="grit"))
    assert float(query @ document) < 0.9999


def test_grit_attention_is_bidirectional(tiny_model):
    """With bidirectional attention the first text token sees later ones: changing the last word moves
    the first token's state, which causal attention would never do."""
    tok, model = tiny_model.backbone.tokenizer, tiny_model.backbone.model
    first = []
    for text in ("the quick brown fox", "the quick brown dog"):
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        for attention in ("bidirectional", "causal"):
            out = run_decoder(model, input_ids=ids, attention_mask=torch.ones_like(ids), attention=attention)
            first.append(out.last_hidden_state[0, 0])
    assert not torch.allclose(first[0], first[2], atol=1e-4)
    torch.testing.assert_close(first[1], first[3])
