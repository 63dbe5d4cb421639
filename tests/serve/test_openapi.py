"""What the OpenAPI document states, checked directly: security only with a key, every error status a
route can answer declared with the error body, and types as strict as the schema says."""

from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient

ERROR = {"$ref": "#/components/schemas/ErrorResponse"}
KEYED_PREFIXES = ("/v1/", "/v2/", "/info", "/tokenize")


@pytest.fixture
def make_client(_tiny_backbone):
    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app

    return lambda **settings: TestClient(
        create_app(GenerativeEmbedder(copy.deepcopy(_tiny_backbone)), ServeSettings(**settings))
    )


def _operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def test_without_a_key_the_document_declares_no_security(make_client):
    document = make_client().get("/openapi.json").json()
    assert "securitySchemes" not in document.get("components", {})
    for method, path, operation in _operations(document):
        assert "security" not in operation and "401" not in operation["responses"], (method, path)


def test_with_a_key_the_guarded_routes_declare_bearer_and_401(make_client):
    document = make_client(api_key="k").get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert [s["type"] + "/" + s["scheme"] for s in schemes.values()] == ["http/bearer"]
    guarded = set()
    for method, path, operation in _operations(document):
        if path.startswith(KEYED_PREFIXES):
            guarded.add((method, path))
            assert operation["security"] == [{name: []} for name in schemes], (method, path)
            response = operation["responses"]["401"]
            assert response["content"]["application/json"]["schema"] == ERROR
            assert "WWW-Authenticate" in response["headers"]
        else:
            assert "security" not in operation and "401" not in operation["responses"], (method, path)
    assert {("GET", "/v1/models"), ("GET", "/v1/models/{model_id}"), ("GET", "/info")} <= guarded


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("POST", "/v1/embeddings", {"400", "413", "422", "429", "503"}),
        ("POST", "/v1/chat/completions", {"400", "413", "422", "429"}),
        ("POST", "/v1/rerank", {"400", "413", "422", "429"}),
        ("POST", "/v2/rerank", {"400", "413", "422", "429"}),
        ("POST", "/v1/inspect", {"400", "413", "422", "429"}),
        ("POST", "/tokenize", {"400", "413", "422"}),
        ("GET", "/v1/models/{model_id}", {"404", "422"}),
    ],
)
def test_error_statuses_are_declared_with_the_error_body(make_client, method, path, statuses):
    operation = make_client().get("/openapi.json").json()["paths"][path][method.lower()]
    errors = {status: r for status, r in operation["responses"].items() if status.startswith(("4", "5"))}
    assert set(errors) == statuses
    for status, response in errors.items():
        assert response["content"]["application/json"]["schema"] == ERROR, status
    if "429" in errors:
        assert "Retry-After" in errors["429"]["headers"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/rerank", {"query": "q", "documents": ["d"], "return_documents": 0}, "return_documents"),
        ("/v1/rerank", {"query": "q", "documents": ["d"], "top_n": True}, "top_n"),
        ("/v2/rerank", {"query": "q", "documents": ["d"], "top_n": 1.0}, "top_n"),
        ("/v1/embeddings", {"input": "x", "steps": "3"}, "steps"),
        ("/v1/embeddings", {"input": "x", "dimensions": 8.0}, "dimensions"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": 1}, "stream"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "4"}, "max_tokens"),
        ("/tokenize", {"input": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
        ("/v1/inspect", {"input": "x", "top": 2.5}, "top"),
    ],
)
def test_booleans_and_integers_are_strict(make_client, path, body, param):
    response = make_client().post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["param"] == param


def test_unreadable_body_is_a_declared_400(make_client):
    response = make_client().post(
        "/v1/embeddings", content=b'{"input": "\xff\xfe"}', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "the request body is not valid UTF-8 JSON: byte 0xff at position 11 is not UTF-8; "
        "send the JSON encoded as UTF-8"
    )
