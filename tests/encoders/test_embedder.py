from __future__ import annotations

import numpy as np
import pytest
import torch

METHODS = ["gircse", "mean", "last", "grit"]
LONG = "a much longer text that forces a lot of padding onto every shorter text in the same batch " * 3


@pytest.mark.parametrize("method", METHODS)
def test_batch_invariance(tiny_model, method):
    text = "the text under test"
    alone = tiny_model.encode([text], method=method, steps=3)
    mixed = tiny_model.encode([LONG, text, LONG + " more", "x"], method=method, steps=3, batch_size=4)
    assert float(alone[0] @ mixed[1]) > 0.9999
    assert float(mixed[1] @ mixed[3]) < 0.99  # texts do differ, so the check above can fail


@pytest.mark.parametrize("method", ["mean", "last"])
def test_bidirectional_batch_invariance(tiny_model, method):
    alone = tiny_model.encode(["short"], method=method, attention="bidirectional")
    mixed = tiny_model.encode([LONG, "short"], method=method, attention="bidirectional")
    assert float(alone[0] @ mixed[1]) > 0.9999


def test_shapes_and_conventions(tiny_model):
    dim = tiny_model.dim
    assert tiny_model.encode(["a", "b", "c"]).shape == (3, dim)
    one = tiny_model.encode("a")
    assert one.shape == (dim,)
    np.testing.assert_allclose(np.linalg.norm(one), 1.0, atol=1e-5)
    raw = tiny_model.encode("a", normalize=False, convert_to_numpy=False)
    assert isinstance(raw, torch.Tensor) and abs(float(raw.norm()) - 1.0) > 1e-3
    np.testing.assert_allclose(raw.numpy() / raw.norm().item(), one, atol=1e-5)


def test_order_is_restored_after_length_sorting(tiny_model):
    texts = ["short", LONG, "medium length text here", "x"]
    together = tiny_model.encode(texts, batch_size=2, steps=2)
    for i, text in enumerate(texts):
        np.testing.assert_allclose(together[i], tiny_model.encode(text, steps=2), atol=1e-4)


def test_empty_inputs(tiny_model):
    assert tiny_model.encode([]).shape == (0, tiny_model.dim)
    for method in METHODS:
        vec = tiny_model.encode("", method=method)
        assert vec.shape == (tiny_model.dim,) and np.isfinite(vec).all()
        np.testing.assert_allclose(np.linalg.norm(vec), 1.0, atol=1e-5)
        vec_i = tiny_model.encode("", method=method, instruction="Some instruction.")
        assert np.isfinite(vec_i).all()


def test_non_string_names_its_index(tiny_model):
    with pytest.raises(TypeError, match=r"texts\[2\] must be a string, got int"):
        tiny_model.encode(["a", "b", 3])


@pytest.mark.parametrize("steps", [0, -1, "many", 2.5, True])
def test_bad_steps(tiny_model, steps):
    with pytest.raises(ValueError, match="steps must be a positive int or 'auto'"):
        tiny_model.encode(["a"], steps=steps)


def test_bad_method_and_attention(tiny_model):
    with pytest.raises(ValueError, match="method must be one of"):
        tiny_model.encode(["a"], method="max")
    with pytest.raises(ValueError, match="attention must be"):
        tiny_model.encode(["a"], method="mean", attention="full")
    with pytest.raises(ValueError, match="grit"):
        tiny_model.encode(["a"], method="grit", attention="causal")


def test_over_long_texts_are_truncated_to_max_length(tiny_model):
    base = "word " * 30
    a = tiny_model.encode(base + "tail one", max_length=20, method="mean")
    b = tiny_model.encode(base + "completely different tail", max_length=20, method="mean")
    np.testing.assert_allclose(a, b, atol=1e-6)  # the tails were cut away
    assert float(tiny_model.encode(base + "tail one", max_length=512, method="mean") @ a) < 0.9999


def test_all_steps_from_one_run_equal_separate_runs(tiny_model):
    texts = ["first text", "second, longer text for padding"]
    all_steps = tiny_model.encode(texts, steps=4, return_all_steps=True)
    assert all_steps.shape == (2, 4, tiny_model.dim)
    for k in (1, 2, 4):
        np.testing.assert_allclose(all_steps[:, k - 1], tiny_model.encode(texts, steps=k), atol=1e-5)
    with pytest.raises(ValueError, match="return_all_steps"):
        tiny_model.encode(texts, method="mean", return_all_steps=True)


def test_adaptive_steps_report_steps_used(tiny_model):
    emb, used = tiny_model.encode(
        ["adaptive", "another text"], steps="auto", max_steps=6, stop_tol=0.99, return_steps_used=True
    )
    assert emb.shape == (2, tiny_model.dim) and used.shape == (2,)
    assert ((used >= 2) & (used <= 6)).all()
    for i, text in enumerate(["adaptive", "another text"]):
        np.testing.assert_allclose(emb[i], tiny_model.encode(text, steps=int(used[i])), atol=1e-4)


def test_mean_excludes_instruction_tokens_but_instruction_still_matters(tiny_model):
    # Mean pooling averages only the text's tokens, so with causal attention (text tokens come after
    # the instruction) the instruction acts only through attention, and still moves the embedding.
    a = tiny_model.encode("the same text", method="mean", instruction="First instruction.")
    b = tiny_model.encode("the same text", method="mean", instruction="A second, different instruction.")
    assert float(a @ b) < 0.9999
    # Pooling really skips instruction positions: compare against a hand-computed text-only mean.
    from genembed.backbone import run_decoder
    from genembed.encoders import collate, encode_prompts

    backbone = tiny_model.backbone
    (p,) = encode_prompts(backbone.tokenizer, ["the same text"], instruction="First instruction.")
    batch = collate([p], backbone.tokenizer.pad_token_id)
    with torch.no_grad():
        h = run_decoder(
            backbone.model, input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).last_hidden_state
    expected = torch.nn.functional.normalize(h[0, p.text_start : p.text_end].mean(0), dim=0).numpy()
    np.testing.assert_allclose(a, expected, atol=1e-5)


def test_instruction_steers_gircse(tiny_model):
    a = tiny_model.encode("a text", instruction="Classify the emotion.")
    b = tiny_model.encode("a text", instruction="Find the topic.")
    assert float(a @ b) < 0.9999


def test_encode_query_and_document_wrappers(tiny_model):
    from genembed.model import DEFAULT_QUERY_INSTRUCTION

    np.testing.assert_allclose(
        tiny_model.encode_query("q"), tiny_model.encode("q", instruction=DEFAULT_QUERY_INSTRUCTION), atol=1e-6
    )
    np.testing.assert_allclose(tiny_model.encode_document("d"), tiny_model.encode("d"), atol=1e-6)


def test_inspect_returns_top_tokens_per_step(tiny_model):
    steps = tiny_model.inspect("what does it say", steps=3, top=4)
    assert [s.step for s in steps] == [1, 2, 3]
    for s in steps:
        probs = [p for _, p in s.tokens]
        assert len(probs) == 4 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6
        assert all(isinstance(t, str) for t, _ in s.tokens)
    # max_length cuts the prompt the soft tokens read, as encode's does
    text = "what does it say about the long text that follows " * 4
    cut = tiny_model.inspect(text, steps=1, top=4, max_length=30)
    assert cut == tiny_model.inspect(text[:200] + " more words", steps=1, top=4, max_length=30)
    assert cut != tiny_model.inspect(text, steps=1, top=4)
