"""The server with a GritLM-format model (tiny Mistral): embeddings in GritLM's format, chat in its turns."""

from __future__ import annotations

import numpy as np
import pytest

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of France."]
INSTRUCTION = "Retrieve semantically similar text."


@pytest.mark.integration
def test_embeddings_and_chat_use_gritlm_format(grit_model):
    import httpx

    from genembed.encoders.prompts import encode_prompts
    from genembed.serve import ServeSettings, create_app, running_server

    served, reference = grit_model("mistral"), grit_model("mistral")
    app = create_app(served, ServeSettings(method="grit"))  # the model's own format: gritlm
    with running_server(app) as (url, _):
        body = {"input": TEXTS, "instruction": INSTRUCTION}
        embedded = httpx.post(url + "/v1/embeddings", json=body, timeout=60).json()
        chat = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 8, "temperature": 0}
        reply = httpx.post(url + "/v1/chat/completions", json=chat, timeout=60).json()
    got = np.array([row["embedding"] for row in embedded["data"]])
    want = reference.encode(TEXTS, instruction=INSTRUCTION, method="grit", prompt_format="gritlm")
    np.testing.assert_allclose(got, want, atol=1e-5)
    plain = reference.encode(TEXTS, instruction=INSTRUCTION, method="grit", prompt_format="plain")
    assert np.abs(got - plain).max() > 1e-3  # the format matters, so the check above can fail
    prompts = encode_prompts(reference.backbone.tokenizer, TEXTS, instruction=INSTRUCTION, prompt_format="gritlm")
    assert embedded["usage"]["prompt_tokens"] == sum(p.text_end - p.text_start for p in prompts)
    assert reply["choices"][0]["message"]["content"] == reference.generate("Hi there", max_new_tokens=8)
    tokens = len(reference.backbone.tokenizer("<|user|>\nHi there\n<|assistant|>\n")["input_ids"])
    assert reply["usage"]["prompt_tokens"] == tokens  # BOS + GritLM's turn
