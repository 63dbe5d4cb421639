"""Cohere embed over HTTP: /v1/embed and /v2/embed driven with the real ``cohere`` clients, every
embedding type, ``truncate``, and errors in the server's shape."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from genembed.encoders.quantize import quantize_embeddings

pytestmark = pytest.mark.integration

TEXTS = ["I love this movie, it is wonderful.", "Paris is the capital of France.", "The product broke after a day."]
QUANTIZED = ("int8", "uint8", "binary", "ubinary")


@pytest.fixture(scope="module")
def v1(served):
    import cohere

    return cohere.Client(base_url=served.url, api_key="unused", timeout=60)


@pytest.fixture(scope="module")
def v2(served):
    import cohere

    return cohere.ClientV2(base_url=served.url, api_key="unused", timeout=60)


def _text_tokens(served, texts) -> int:
    return sum(len(served.reference.backbone.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)


def _check_types(embeddings, floats: np.ndarray, reference) -> None:
    """Each quantized type is the documented function of the float vectors, and (but for values at a
    level's edge, where the server's batch and the reference's round differently) the reference's."""
    for kind in QUANTIZED:
        got = np.array(getattr(embeddings, kind))
        np.testing.assert_array_equal(got, quantize_embeddings(floats, kind).astype(np.int64))
        expected = reference(kind).astype(np.int64)
        assert got.shape == expected.shape
        if kind.endswith("int8"):
            assert np.abs(got - expected).max() <= 1
        else:
            assert (got != expected).mean() < 0.05
    assert np.array(embeddings.binary).shape == (len(floats), floats.shape[1] // 8)
    assert np.array(embeddings.int8).min() >= -128 and np.array(embeddings.uint8).max() <= 255


def test_v1_client_floats(served, v1):
    response = v1.embed(texts=TEXTS, model="embed-english-v3.0", input_type="search_query")
    assert response.response_type == "embeddings_floats"
    np.testing.assert_allclose(np.array(response.embeddings), served.reference.encode_query(TEXTS), atol=1e-5)
    assert response.texts == TEXTS and response.id
    assert response.meta.api_version.version == "1"
    assert response.meta.billed_units.input_tokens == _text_tokens(served, TEXTS)
    document = v1.embed(texts=TEXTS, input_type="search_document")  # the model's document prompt: none
    np.testing.assert_allclose(np.array(document.embeddings), served.reference.encode_document(TEXTS), atol=1e-5)
    plain = v1.embed(texts=TEXTS)  # no input_type: no instruction
    np.testing.assert_allclose(np.array(plain.embeddings), served.reference.encode(TEXTS, instruction=""), atol=1e-5)


def test_v1_client_every_embedding_type(served, v1):
    response = v1.embed(texts=TEXTS, input_type="search_query", embedding_types=["float", *QUANTIZED, "base64"])
    assert response.response_type == "embeddings_by_type" and response.texts == TEXTS
    floats = np.array(response.embeddings.float_, dtype=np.float32)
    np.testing.assert_allclose(floats, served.reference.encode_query(TEXTS), atol=1e-5)
    _check_types(response.embeddings, floats, lambda kind: served.reference.encode_query(TEXTS, precision=kind))
    decoded = [np.frombuffer(base64.b64decode(b), dtype="<f4") for b in response.embeddings.base64]
    np.testing.assert_array_equal(np.stack(decoded), floats)
    only = v1.embed(texts=TEXTS, embedding_types=["ubinary"]).embeddings
    assert only.float_ is None and only.int8 is None and np.array(only.ubinary).shape == (3, served.reference.dim // 8)


def test_v2_client_every_embedding_type(served, v2):
    instruction = served.state.instructions["classification"]
    response = v2.embed(
        texts=TEXTS, model="embed-v4.0", input_type="classification", embedding_types=["float", *QUANTIZED]
    )
    floats = np.array(response.embeddings.float_, dtype=np.float32)
    np.testing.assert_allclose(floats, served.reference.encode(TEXTS, instruction=instruction), atol=1e-5)
    reference = served.reference
    _check_types(
        response.embeddings, floats, lambda kind: reference.encode(TEXTS, instruction=instruction, precision=kind)
    )
    assert response.meta.api_version.version == "2" and response.texts == TEXTS
    default = v2.embed(texts=TEXTS, model="m", input_type="clustering")  # float unless asked
    assert default.embeddings.float_ is not None and default.embeddings.int8 is None
    cut = v2.embed(texts=TEXTS, model="m", input_type="search_query", output_dimension=16)
    expected = served.reference.encode_query(TEXTS, truncate_dim=16)
    np.testing.assert_allclose(np.array(cut.embeddings.float_), expected, atol=1e-5)


def _cut(served, text: str, n: int, truncate: str) -> str:
    offsets = served.reference.backbone.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = offsets["offset_mapping"]
    return text[: offsets[n - 1][1]] if truncate == "END" else text[offsets[len(offsets) - n][0] :]


@pytest.mark.parametrize("truncate", ["END", "START"])
def test_truncate_cuts_texts_over_max_tokens(served, v2, truncate):
    response = v2.embed(texts=TEXTS, model="m", input_type="search_document", max_tokens=3, truncate=truncate)
    cut = [_cut(served, t, 3, truncate) for t in TEXTS]
    assert all(len(c) < len(t) for c, t in zip(cut, TEXTS, strict=True))
    np.testing.assert_allclose(np.array(response.embeddings.float_), served.reference.encode(cut), atol=1e-5)
    assert response.texts == TEXTS and response.meta.billed_units.input_tokens == _text_tokens(served, cut)


def test_truncate_against_the_server_limit(serve_tiny):
    long = "The committee discussed the budget for the new library at great length. " * 4
    with serve_tiny(max_input_tokens=40) as s:
        body = {"texts": [long, TEXTS[1]], "input_type": "search_document"}
        refused = httpx.post(s.url + "/v1/embed", json={**body, "truncate": "NONE"}, timeout=60)
        assert refused.status_code == 413 and refused.json()["error"]["param"] == "texts.0"
        for truncate in ("END", "START"):
            response = httpx.post(s.url + "/v1/embed", json={**body, "truncate": truncate}, timeout=60)
            assert response.status_code == 200, response.text
            got = np.array(response.json()["embeddings"])
            reference = s.reference.encode_document([long, TEXTS[1]], max_length=40)
            np.testing.assert_allclose(got[1], reference[1], atol=1e-5)  # a short text is not cut
            if truncate == "END":  # the encoder's own cut keeps the start too
                assert np.dot(got[0], reference[0]) > 0.99
        query = httpx.post(s.url + "/v1/embed", json={**body, "input_type": "search_query"}, timeout=60)
        assert query.status_code == 413  # the query instruction and template alone are over 40 tokens


def _error(served, path: str, **body) -> dict:
    response = httpx.post(served.url + path, json={"texts": TEXTS, **body}, timeout=60)
    assert response.status_code == 422, response.text
    return response.json()["error"]


@pytest.mark.parametrize("path", ["/v1/embed", "/v2/embed"])
def test_bad_input_is_a_clear_error(served, path):
    error = _error(served, path, input_type="search_queries")
    assert error["param"] == "input_type" and "search_query" in error["message"]
    assert error["type"] == "invalid_request_error"
    error = _error(served, path, embedding_types=["float", "int4"])
    assert error["param"] == "embedding_types.1" and "ubinary" in error["message"]
    error = _error(served, path, truncate="MIDDLE")
    assert error["param"] == "truncate"
    error = _error(served, path, images=["data:image/png;base64,AAAA"])
    assert error["param"] == "images" and "text only" in error["message"]
    one = _error(served, path, texts=["alone"], embedding_types=["int8"])
    assert one["param"] == "embedding_types" and "two or more texts" in one["message"]
    assert _error(served, path, texts=[])["param"] == "texts"


def test_v2_errors_and_the_client_raising_them(served, v2):
    error = _error(served, "/v2/embed", max_tokens=2, truncate="NONE")
    assert error["param"] == "texts.0" and "max_tokens=2" in error["message"]
    assert _error(served, "/v2/embed", output_dimension=10_000)["param"] == "output_dimension"
    import cohere

    with pytest.raises(cohere.core.ApiError) as raised:
        v2.embed(texts=TEXTS, model="m", input_type="image")
    assert raised.value.status_code == 422 and raised.value.body["error"]["param"] == "input_type"
