"""GRIT parity: genembed against the ``gritlm`` package (1.0.2, ContextualAI's reference code), on tiny
random Mistral and Mixtral models (the architectures of GritLM-7B and GritLM-8x7B; ``grit_folders`` in
tests/conftest.py).

The reference runs as its README says: ``GritLM(folder, mode="unified", pooling_method="mean",
attn="bbcc")`` (float32, CPU, eager attention), instructions wrapped by GritLM's
``<|user|>\\n{instruction}\\n<|embed|>\\n`` (``<|embed|>\\n`` without one), generation from
``<|user|>\\n{prompt}\\n<|assistant|>\\n`` with BOS, greedy. genembed runs ``method="grit",
prompt_format="gritlm"``.

Is the reference really bidirectional? gritlm asks for it by passing ``is_causal=False`` to the stock
transformers model (``self.model.model(**inputs, is_causal=False)``); GritLM-7B's hub repo ships its own
modeling code for that. Under transformers 5.x the stock Mistral and Mixtral honour the keyword
(``merge_with_config_defaults`` sets ``config.is_causal``, and the mask is built by
``create_bidirectional_mask``), so the stock models are a faithful reference; ``test_the_reference_is_
bidirectional`` checks it on the reference's own call (a first-position state that depends on the last
token), and that its causal variant (``attn="cccc"``) is far from genembed's embeddings, so parity
could not pass against a reference that silently ran causal.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch

pytest.importorskip("gritlm", reason="the GRIT reference; `make setup` installs gritlm==1.0.2 --no-deps")

KINDS = ("mistral", "mixtral")
TEXTS = [
    "Hi",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Paris is the capital of France.",
    "I love this movie, it is wonderful and moving.",
]
INSTRUCTION = "Retrieve semantically similar text."
MIN_COSINE = 0.9999


def gritlm_instruction(instruction: str) -> str:
    """The instruction wrapping of GritLM's README (what ``GritLM.encode`` is given as ``instruction``)."""
    return "<|user|>\n" + instruction + "\n<|embed|>\n" if instruction else "<|embed|>\n"


@cache
def _reference(folder, attn: str = "bbcc"):
    from gritlm import GritLM

    return GritLM(
        str(folder),
        mode="unified",
        pooling_method="mean",
        attn=attn,
        device="cpu",
        dtype=torch.float32,
        attn_implementation="eager",
    )


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("instruction", ["", INSTRUCTION], ids=["no-instruction", "instruction"])
def test_embeddings_match_gritlm(grit_folders, grit_model, kind, instruction):
    folder = grit_folders[kind]
    want = _reference(folder).encode(TEXTS, instruction=gritlm_instruction(instruction), batch_size=len(TEXTS))
    model = grit_model(kind)
    got = model.encode(TEXTS, instruction=instruction, method="grit", prompt_format="gritlm", center=False)
    assert _cosines(got, want).min() > MIN_COSINE
    one = model.encode(TEXTS[1], instruction=instruction)  # the model's own method and format, one text
    assert _cosines(one, want[1]) > MIN_COSINE


@pytest.mark.parametrize("kind", KINDS)
def test_the_reference_is_bidirectional(grit_folders, grit_model, kind):
    reference = _reference(grit_folders[kind])
    inputs = reference.tokenizer(
        ["<|embed|>\nthe cat sat", "<|embed|>\nthe cat ran"], padding=True, return_tensors="pt"
    )
    with torch.no_grad():  # the call GritLM.encode makes
        hidden = reference.model.model(**inputs, is_causal=False)[0]
    assert not torch.allclose(hidden[0, 0], hidden[1, 0], atol=1e-4)  # position 0 sees the last token
    causal = _reference(grit_folders[kind], "cccc").encode(TEXTS, instruction=gritlm_instruction(INSTRUCTION))
    got = grit_model(kind).encode(TEXTS, instruction=INSTRUCTION)
    assert _cosines(got, causal).max() < 0.99


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_matches_gritlm(grit_folders, grit_model, kind):
    from genembed.generation.chat import chat_prompt_ids, eos_token_ids
    from genembed.generation.decoding import decode_stream

    prompt, new = "What is the capital of France?", 24
    reference, model = _reference(grit_folders[kind]), grit_model(kind)
    inputs = reference.tokenizer("<|user|>\n" + prompt + "\n<|assistant|>\n", return_tensors="pt")
    out = reference.generate(**inputs, max_new_tokens=new, do_sample=False)
    want = out[0, inputs["input_ids"].shape[1] :].tolist()
    ids = chat_prompt_ids(model.backbone.tokenizer, prompt, model.prompt_format)
    assert ids == inputs["input_ids"][0].tolist()  # BOS + GritLM's turn
    backbone = model.backbone
    plain = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0}  # the reference decodes without penalties
    stream = decode_stream(
        backbone.model, torch.tensor([ids]), max_new_tokens=new, eos_token_ids=eos_token_ids(backbone), **plain
    )
    got = list(stream)
    eos = backbone.tokenizer.eos_token_id
    want = want[: want.index(eos)] if eos in want else want  # the reference keeps the EOS it stops at
    assert got == want and len(set(got)) > 2  # identical tokens, and not one token repeated
    text = model.generate(prompt, max_new_tokens=new, **plain)
    assert text == backbone.tokenizer.decode(got, skip_special_tokens=True)  # the public path, same tokens
