"""sentence-transformers conventions on the facade: prompts, keywords, precision, truncation, similarity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed.model import DEFAULT_QUERY_INSTRUCTION

TEXTS = ["the cat sat on the mat", "stock markets fell sharply", "a kitten naps on a rug"]


def test_default_prompts_and_named_instructions(tiny_model):
    assert tiny_model.prompts == {
        "query": DEFAULT_QUERY_INSTRUCTION,
        "document": "",
        "classification": "Classify the given text.",
        "clustering": "Identify the main topic of the given text.",
        "text-matching": "Retrieve semantically similar text.",
    }
    assert tiny_model.default_prompt_name is None
    query = tiny_model.encode(TEXTS, instruction=DEFAULT_QUERY_INSTRUCTION)
    np.testing.assert_array_equal(tiny_model.encode(TEXTS, prompt_name="query"), query)
    np.testing.assert_array_equal(tiny_model.encode_query(TEXTS), query)
    np.testing.assert_array_equal(tiny_model.encode(TEXTS, prompt=DEFAULT_QUERY_INSTRUCTION), query)
    plain = tiny_model.encode(TEXTS)
    np.testing.assert_array_equal(tiny_model.encode_document(TEXTS), plain)
    classify = tiny_model.encode(TEXTS, instruction="Classify the given text.")
    np.testing.assert_array_equal(tiny_model.encode(TEXTS, prompt_name="classification"), classify)
    # None prompts stand for the caller's instruction, and without one there is none
    tiny_model.prompts["classification"] = None
    np.testing.assert_array_equal(tiny_model.encode(TEXTS, prompt_name="classification"), plain)
    own = tiny_model.encode(TEXTS, instruction="Classify the topic.")
    np.testing.assert_array_equal(
        tiny_model.encode(TEXTS, prompt_name="classification", instruction="Classify the topic."), own
    )
    assert not np.allclose(own, plain, atol=1e-4)


def test_changed_prompts_and_default_prompt_name(tiny_model):
    tiny_model.prompts["query"] = "Find the topic."
    tiny_model.prompts["document"] = "Represent the passage."
    np.testing.assert_array_equal(
        tiny_model.encode_query(TEXTS), tiny_model.encode(TEXTS, instruction="Find the topic.")
    )
    np.testing.assert_array_equal(
        tiny_model.encode_document(TEXTS), tiny_model.encode(TEXTS, instruction="Represent the passage.")
    )
    # an explicit instruction wins over the side's prompt; "" is an explicit "none"
    np.testing.assert_array_equal(
        tiny_model.encode_query(TEXTS, instruction=""), tiny_model.encode(TEXTS, instruction="")
    )
    tiny_model.default_prompt_name = "query"
    np.testing.assert_array_equal(tiny_model.encode(TEXTS), tiny_model.encode(TEXTS, instruction="Find the topic."))
    np.testing.assert_array_equal(
        tiny_model.encode(TEXTS, instruction=""), tiny_model.encode_document(TEXTS, instruction="")
    )


def test_prompt_errors(tiny_model):
    with pytest.raises(
        ValueError, match=r"unknown prompt_name 'search'.*'classification', 'clustering', 'document', 'query'"
    ):
        tiny_model.encode("x", prompt_name="search")
    with pytest.raises(ValueError, match="disagree"):
        tiny_model.encode("x", instruction="a", prompt="b")
    with pytest.raises(ValueError, match="disagree"):
        tiny_model.encode("x", normalize=True, normalize_embeddings=False)


def test_normalize_embeddings_and_tensor_output(tiny_model):
    raw = tiny_model.encode(TEXTS, normalize_embeddings=False, convert_to_tensor=True)
    assert isinstance(raw, torch.Tensor) and raw.shape == (3, tiny_model.dim)
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(3), atol=1e-3)
    unit = tiny_model.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(unit, torch.nn.functional.normalize(raw, dim=-1).numpy(), atol=1e-6)
    np.testing.assert_array_equal(tiny_model.encode(TEXTS), unit)  # genembed normalizes by default
    # convert_to_tensor wins over convert_to_numpy, as in sentence-transformers
    assert isinstance(tiny_model.encode("x", convert_to_numpy=True, convert_to_tensor=True), torch.Tensor)


def test_truncate_dim_truncates_then_normalizes(tiny_model):
    raw = tiny_model.encode(TEXTS, normalize=False)
    short = tiny_model.encode(TEXTS, truncate_dim=8)
    assert short.shape == (3, 8)
    np.testing.assert_allclose(short, raw[:, :8] / np.linalg.norm(raw[:, :8], axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(tiny_model.encode(TEXTS, truncate_dim=8, normalize=False), raw[:, :8], atol=1e-6)
    tiny_model.truncate_dim = 8
    assert tiny_model.get_sentence_embedding_dimension() == 8
    assert tiny_model.encode("x").shape == (8,)
    with pytest.raises(ValueError, match="truncate_dim must be a positive int"):
        tiny_model.encode("x", truncate_dim=0)


def test_get_sentence_embedding_dimension(tiny_model):
    assert tiny_model.get_sentence_embedding_dimension() == tiny_model.dim == 32
    assert tiny_model.encode("x").shape == (tiny_model.get_sentence_embedding_dimension(),)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_precision_matches_sentence_transformers(tiny_model, precision):
    from sentence_transformers.util.quantization import quantize_embeddings

    floats = tiny_model.encode(TEXTS, truncate_dim=20)
    ours = tiny_model.encode(TEXTS, precision=precision, truncate_dim=20)
    theirs = quantize_embeddings(floats, precision=precision)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    tensor = tiny_model.encode(TEXTS, precision=precision, truncate_dim=20, convert_to_tensor=True)
    np.testing.assert_array_equal(tensor.numpy(), theirs)


def test_precision_errors(tiny_model):
    with pytest.raises(ValueError, match="precision must be one of"):
        tiny_model.encode(TEXTS, precision="float16")
    with pytest.raises(ValueError, match="at least two embeddings"):
        tiny_model.encode("one text", precision="int8")
    assert tiny_model.encode("one text", precision="ubinary").shape == (4,)  # 32 dims -> 4 bytes


def test_similarity_follows_similarity_fn_name(tiny_model):
    from sentence_transformers import util

    q, d = tiny_model.encode(TEXTS[:2], normalize=False), tiny_model.encode(TEXTS, normalize=False)
    assert tiny_model.similarity_fn_name == "cosine"
    torch.testing.assert_close(tiny_model.similarity(q, d), util.cos_sim(q, d))
    torch.testing.assert_close(tiny_model.similarity(q[0], d), util.cos_sim(q[0], d))
    for name, reference in [
        ("dot", util.dot_score),
        ("euclidean", util.euclidean_sim),
        ("manhattan", util.manhattan_sim),
    ]:
        tiny_model.similarity_fn_name = name
        torch.testing.assert_close(tiny_model.similarity(q, d), reference(q, d), atol=1e-5, rtol=1e-5)
    tiny_model.similarity_fn_name = "cosine"
    torch.testing.assert_close(tiny_model.similarity(q, d, similarity_fn_name="dot"), util.dot_score(q, d))
    torch.testing.assert_close(tiny_model.similarity_pairwise(q, d[:2]), util.pairwise_cos_sim(q, d[:2]))
    with pytest.raises(ValueError, match="similarity_fn_name must be one of"):
        tiny_model.similarity_fn_name = "hamming"


def test_device_and_batch_size_keywords(tiny_model):
    expected = tiny_model.encode(TEXTS)
    np.testing.assert_allclose(
        tiny_model.encode(TEXTS, device="cpu", batch_size=1, show_progress_bar=False), expected, atol=1e-6
    )
    assert tiny_model.device.type == "cpu"
    with pytest.raises(ValueError, match="device must be 'auto' or a torch device"):
        tiny_model.encode(TEXTS, device="warp-drive")


def test_model_defaults_drive_encode(tiny_model):
    three = tiny_model.encode(TEXTS, steps=3)
    tiny_model.steps = 3
    np.testing.assert_array_equal(tiny_model.encode(TEXTS), three)
    tiny_model.method = "mean"
    np.testing.assert_array_equal(tiny_model.encode(TEXTS), tiny_model.encode(TEXTS, method="mean"))
    # another method than the model's ignores the model's attention and prompt format
    tiny_model.attention = "bidirectional"
    np.testing.assert_array_equal(
        tiny_model.encode(TEXTS, method="last"), tiny_model.encode(TEXTS, method="last", attention="causal")
    )


def test_encode_takes_settings_as_keywords_or_as_one_object(tiny_model):
    from genembed.encoders.settings import EmbedSettings

    by_keywords = tiny_model.encode(TEXTS, method="mean", max_length=16)
    by_object = tiny_model.encode(TEXTS, settings=EmbedSettings(method="mean", max_length=16))
    np.testing.assert_array_equal(by_keywords, by_object)
    # keywords change the object's settings; another method brings its own attention and prompt format
    changed = tiny_model.encode(TEXTS, settings=EmbedSettings(method="grit"), method="mean", max_length=16)
    np.testing.assert_array_equal(changed, by_keywords)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'sentences_per_batch'.*'steps'"):
        tiny_model.encode(TEXTS, sentences_per_batch=4)


def test_encode_takes_the_speed_settings_as_keywords(tiny_model):
    """Token-sized batches and the prefix cache (genembed.encoders.batching, .prefix_cache) change no
    embedding beyond rounding, and encode takes them as setting overrides like use_cache or fast_path."""
    texts = [*TEXTS, "a", "a far longer text than the others, so that the batches differ in their shapes"]
    whole = tiny_model.encode(texts, cache_prefix=False, instruction="Find it.")
    np.testing.assert_allclose(tiny_model.encode(texts, instruction="Find it."), whole, atol=2e-6)
    np.testing.assert_allclose(
        tiny_model.encode(texts, instruction="Find it.", batch_size=1, batch_tokens=4096), whole, atol=2e-6
    )
    with pytest.raises(ValueError, match="batch_tokens must be an int >= 0"):
        tiny_model.encode(texts, batch_tokens=-1)


def test_encode_takes_prompts_already_tokenized(tiny_model, monkeypatch):
    from genembed.encoders import prompts as prompts_mod

    settings = tiny_model.embed_settings(max_length=33)  # the texts cut to 3 tokens after the template
    prompts = prompts_mod.tokenize(tiny_model.backbone.tokenizer, TEXTS, "Find it.", settings)
    expected = tiny_model.encode(TEXTS, instruction="Find it.", max_length=33)
    monkeypatch.setattr(prompts_mod, "encode_prompts", lambda *a, **k: pytest.fail("tokenized again"))
    got = tiny_model.encode(TEXTS, instruction="Find it.", max_length=33, prompts=prompts)
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="1 prompts for 2 texts; give one prompt per text"):
        tiny_model.encode(TEXTS[:2], instruction="Find it.", prompts=prompts[:1])


def test_steps_and_settings_resolve_without_calling_back_into_the_model(tiny_model):
    """The model's settings changed by a call follow one rule (encoders.settings.override_fields)."""
    tiny_model.method, tiny_model.prompt_format, tiny_model.steps = "mean", "gritlm", "auto"
    own = tiny_model.embed_settings()
    assert (own.method, own.prompt_format, own.adaptive) == ("mean", "gritlm", True)
    assert tiny_model.embed_settings(prompt_format="").prompt_format == "gritlm"  # "": the model's own
    other = tiny_model.embed_settings(method="gircse", steps=2)
    assert (other.method, other.prompt_format, other.steps, other.adaptive) == ("gircse", "chat", 2, False)
    assert own.override(method="gircse", steps=2) == other


def test_tokenized_names_the_prompts_already_tokenized_and_encode_stays_small(tiny_model):
    import inspect

    prompts = tiny_model.embed_settings().prompts(tiny_model.backbone.tokenizer, TEXTS, "")
    with pytest.deprecated_call(match=r"encode\(prompts=...\) is deprecated: use tokenized="):
        former = tiny_model.encode(TEXTS, prompts=prompts)
    np.testing.assert_array_equal(tiny_model.encode(TEXTS, tokenized=prompts), former)
    named = [p for p in inspect.signature(tiny_model.encode).parameters.values() if p.kind != p.VAR_KEYWORD]
    assert len(named) <= 14
