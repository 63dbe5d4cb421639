"""Fuzz every operation of the published OpenAPI schema (valid and invalid bodies): never a 5xx, and
every error in the OpenAI shape."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

KEY = "fuzz-key"


@pytest.fixture(scope="module")
def keyed_server(_tiny_backbone):
    import copy

    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app, running_server

    # small limits keep each generated request cheap on the tiny model
    settings = ServeSettings(api_key=KEY, max_new_tokens=16, default_max_new_tokens=8, max_steps=6, max_inputs=16)
    with running_server(create_app(GenerativeEmbedder(copy.deepcopy(_tiny_backbone)), settings)) as (url, _):
        yield url


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_server_errors_on_generated_requests(keyed_server, mode):
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(keyed_server + "/openapi.json")
    generation = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    seen: dict[str, set[int]] = {}

    @given(case=schema.as_strategy(generation_mode=generation))
    @settings(
        max_examples=120,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        response = case.call(base_url=keyed_server, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        seen.setdefault(f"{case.method} {case.path}", set()).add(response.status_code)
        assert response.status_code < 500, f"{case.method} {case.path} -> {response.status_code}: {response.text}"
        if response.status_code >= 400:
            error = response.json()["error"]
            assert isinstance(error["message"], str) and error["message"]

    check()
    assert {"POST /v1/embeddings", "POST /v1/chat/completions", "POST /v1/rerank"} <= set(seen)
    if mode == "positive":  # valid bodies mostly succeed
        assert 200 in seen["POST /v1/embeddings"] and 200 in seen["POST /v1/rerank"]
    else:
        assert 422 in seen["POST /v1/embeddings"] and 422 in seen["POST /v1/chat/completions"]
