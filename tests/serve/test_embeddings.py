from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.integration

TEXTS = ["The quick brown fox jumps over the lazy dog.", "A man is playing a guitar.", "Hi", "Paris, France"]


def test_float_embeddings_equal_direct_encoding(served, openai_client):
    response = openai_client.embeddings.create(input=TEXTS, model="anything", encoding_format="float")
    got = np.array([d.embedding for d in response.data])
    assert [d.index for d in response.data] == [0, 1, 2, 3]
    assert all(d.object == "embedding" for d in response.data)
    np.testing.assert_allclose(got, served.reference.encode(TEXTS), atol=1e-5)
    assert response.model == served.reference.name  # the served model's name, not the client's
    tokens = sum(len(ids) for ids in served.reference.backbone.tokenizer(TEXTS, add_special_tokens=False).input_ids)
    assert response.usage.prompt_tokens == response.usage.total_tokens == tokens


def test_base64_is_the_openai_client_default_and_decodes_to_the_floats(served, openai_client):
    as_floats = openai_client.embeddings.create(input=TEXTS, model="m", encoding_format="float")
    default = openai_client.embeddings.create(input=TEXTS, model="m")  # the client asks for base64
    np.testing.assert_array_equal(
        np.array([d.embedding for d in default.data]), np.array([d.embedding for d in as_floats.data])
    )
    raw = httpx.post(served.url + "/v1/embeddings", json={"input": TEXTS, "encoding_format": "base64"}).json()
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw["data"]]
    np.testing.assert_array_equal(np.array(vectors), np.float32([d.embedding for d in as_floats.data]))


def test_one_string_gives_one_embedding(served, openai_client):
    response = openai_client.embeddings.create(input="hello there", model="m", encoding_format="float")
    assert len(response.data) == 1
    np.testing.assert_allclose(response.data[0].embedding, served.reference.encode("hello there"), atol=1e-5)


def test_instruction_and_steps_extensions(served, openai_client):
    response = openai_client.embeddings.create(
        input=TEXTS[:2],
        model="m",
        encoding_format="float",
        extra_body={"instruction": "Classify the emotion expressed in the given text.", "steps": 2},
    )
    expected = served.reference.encode(
        TEXTS[:2], instruction="Classify the emotion expressed in the given text.", steps=2
    )
    np.testing.assert_allclose(np.array([d.embedding for d in response.data]), expected, atol=1e-5)
    plain = served.reference.encode(TEXTS[:2])
    assert np.abs(expected - plain).max() > 1e-3  # the extensions change the embedding


def test_adaptive_steps_over_http_as_in_python(served):
    body = httpx.post(served.url + "/v1/embeddings", json={"input": TEXTS, "steps": "auto"})
    assert body.status_code == 200, body.text
    got = np.array([d["embedding"] for d in body.json()["data"]])
    np.testing.assert_allclose(got, served.reference.encode(TEXTS, steps="auto"), atol=1e-5)
    assert np.abs(got - served.reference.encode(TEXTS)).max() > 1e-4  # not the default K


def test_dimensions_truncate_and_renormalize(served, openai_client):
    response = openai_client.embeddings.create(input=TEXTS, model="m", dimensions=8, encoding_format="float")
    got = np.array([d.embedding for d in response.data])
    full = served.reference.encode(TEXTS)
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_models_and_health(served, openai_client):
    models = openai_client.models.list()
    assert [m.id for m in models.data] == [served.reference.name]
    assert openai_client.models.retrieve(served.reference.name).id == served.reference.name
    health = httpx.get(served.url + "/health").json()
    assert health["status"] == "ok" and health["model"] == served.reference.name
    assert health["batched_requests"] >= 1


@pytest.mark.parametrize("method", ["mean", "grit"])
def test_single_pass_methods(serve_tiny, method):
    with serve_tiny(method=method) as s:
        bodies = [{"input": TEXTS[:2]}, {"input": TEXTS[2:], "steps": 3}]  # steps mean nothing here
        for body in bodies:
            got = httpx.post(s.url + "/v1/embeddings", json=body).json()["data"]
            expected = s.reference.encode(body["input"], method=method)
            np.testing.assert_allclose(np.array([d["embedding"] for d in got]), expected, atol=1e-5)


def test_each_text_is_tokenized_once_on_the_event_loop_not_on_the_model_thread(served, openai_client, monkeypatch):
    import threading

    from genembed.encoders import prompts as prompts_mod
    from genembed.serve import state as state_mod

    calls = []

    def counted(original):
        return lambda tokenizer, texts, **kw: (
            calls.append((threading.current_thread().name, len(texts))) or (original(tokenizer, texts, **kw))
        )

    monkeypatch.setattr(prompts_mod, "encode_prompts", counted(prompts_mod.encode_prompts))  # the encoder's
    monkeypatch.setattr(state_mod, "encode_prompts", counted(state_mod.encode_prompts))  # the server's
    texts = ["a first sentence", "and a second one, a little longer"]
    response = openai_client.embeddings.create(input=texts, model="m", encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in response.data], served.reference.encode(texts), atol=1e-5)
    served_calls = [c for c in calls if c[1] == len(texts)]
    assert len(served_calls) == 2  # the server's prompts, then the reference's own encode in this thread
    assert served_calls[0][0] != served_calls[1][0] == threading.current_thread().name
