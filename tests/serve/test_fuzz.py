"""The OpenAPI document is the contract: a bounded property-based fuzz of every operation (schemathesis,
against the in-process app), with and without an API key, valid and invalid requests.

Each generated request must get a response that the document declares: no 5xx, only declared
statuses, declared content types and headers, bodies that validate against the declared schemas,
invalid requests refused with a 4xx, and (with a key) requests without it refused. Examples are
derandomized, so a failure reproduces."""

from __future__ import annotations

import copy

import pytest

pytestmark = pytest.mark.integration

KEY = "fuzz-key"
OPERATIONS = [
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/embed"),
    ("POST", "/v2/embed"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/rerank"),
    ("POST", "/v1/inspect"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model_id}"),
    ("POST", "/v2/rerank"),
    ("GET", "/info"),
    ("POST", "/tokenize"),
    ("GET", "/health"),
    ("GET", "/metrics"),
]
# operations where no request can be invalid (no body, no parameter or only a free string in the path)
NOTHING_INVALID = {
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model_id}"),
    ("GET", "/info"),
    ("GET", "/health"),
    ("GET", "/metrics"),
}
CASES = [
    (m, p, mode)
    for m, p in OPERATIONS
    for mode in ("positive", "negative")
    if (m, p, mode)[:2] not in NOTHING_INVALID or mode == "positive"
]
# per case and key setting; invalid requests are cheap (refused before the model) and need more examples
# to reach each field (40 find a lax boolean that 12 miss)
EXAMPLES = {"positive": 15, "negative": 40}


def _app(backbone, key: str | None):
    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app

    # small limits keep each generated request cheap on the tiny model
    settings = ServeSettings(
        api_key=key,
        max_new_tokens=16,
        default_max_new_tokens=8,
        max_steps=6,
        max_inputs=16,
        max_input_tokens=128,
        max_request_tokens=1024,
    )
    return create_app(GenerativeEmbedder(copy.deepcopy(backbone)), settings)


def test_the_document_lists_every_operation(_tiny_backbone):
    from fastapi.testclient import TestClient

    for key in (None, KEY):
        document = TestClient(_app(_tiny_backbone, key)).get("/openapi.json").json()
        listed = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
        assert listed == set(OPERATIONS)


@pytest.mark.parametrize("key", [None, KEY], ids=["open", "keyed"])
@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {mode}" for m, p, mode in CASES])
def test_responses_follow_the_document(_tiny_backbone, method, path, mode, key):
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        ignored_auth,
        negative_data_rejection,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    schema = schemathesis.openapi.from_asgi("/openapi.json", _app(_tiny_backbone, key))
    operation = schema[path][method]
    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        negative_data_rejection,
    ]
    if key is not None:
        checks.append(ignored_auth)
    headers = {"Authorization": f"Bearer {KEY}"} if key else {}
    statuses: list[int] = []

    @given(case=operation.as_strategy(generation_mode=generation))
    @settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        response = case.call_and_validate(headers=headers, checks=checks)
        statuses.append(response.status_code)

    check()
    assert statuses, "no request was generated"
    if mode == "positive" and path != "/v1/models/{model_id}":  # (random model ids are 404)
        assert 200 in statuses, f"no valid request succeeded: {sorted(statuses)}"
