"""Every failure is answered in the OpenAI error shape with the right status."""

from __future__ import annotations

import asyncio
import threading

import httpx
import openai
import pytest

pytestmark = pytest.mark.integration


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": []}, "input"),
        ({"input": 5}, "input"),
        ({"input": ["ok", 3]}, "input.1"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "steps": 0}, "steps"),
        ({"input": "x", "steps": "many"}, "steps"),
        ({"input": ""}, "input"),
        ({"input": ["ok", ""]}, "input.1"),
    ],
)
def test_malformed_embedding_bodies_are_422(served, body, param):
    error = _error(httpx.post(served.url + "/v1/embeddings", json=body), 422)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_invalid_json_and_bad_values_are_422(served):
    json_header = {"content-type": "application/json"}
    error = _error(httpx.post(served.url + "/v1/embeddings", content=b'{"input": "x",}', headers=json_header), 400)
    assert error["param"] == "body" and error["code"] == "invalid_json"
    assert error["message"].startswith("the request body is not valid JSON at character 14: "), error["message"]
    error = _error(httpx.post(served.url + "/v1/embeddings", json={"input": ""}), 422)
    assert error["message"] == (
        "invalid request: input: Value error, an empty input has nothing to embed; send at least one character"
    )
    lone_surrogate = b'{"input": "ok \\ud800"}'  # valid JSON, but no valid text for a tokenizer
    error = _error(httpx.post(served.url + "/v1/embeddings", content=lone_surrogate, headers=json_header), 422)
    assert "lone surrogate" in error["message"]
    dim = served.reference.dim
    error = _error(httpx.post(served.url + "/v1/embeddings", json={"input": "x", "dimensions": dim + 1}), 422)
    assert f"exceeds the model's embedding size {dim}" in error["message"]
    error = _error(httpx.post(served.url + "/v1/embeddings", json={"input": "x", "steps": 21}), 422)
    assert "max_steps=20" in error["message"]
    for body in ({"messages": []}, {"messages": [{"role": "robot", "content": "hi"}]}, {"messages": "hi"}):
        _error(httpx.post(served.url + "/v1/chat/completions", json=body), 422)
    _error(httpx.post(served.url + "/v1/rerank", json={"query": "q", "documents": []}), 422)
    error = _error(httpx.post(served.url + "/v1/rerank", json={"query": "", "documents": ["d"]}), 422)
    assert error["message"] == (
        "invalid request: query: Value error, query must be a non-empty string: reranking scores the documents "
        "against it"
    )


def test_bad_values_say_what_is_accepted(served):
    post = lambda path, body: httpx.post(served.url + path, json=body)  # noqa: E731
    for steps in ("five", 0, 2.5):
        error = _error(post("/v1/embeddings", {"input": "x", "steps": steps}), 422)
        assert (
            error["message"]
            == f"invalid request: steps: Value error, steps must be an integer >= 1 or 'auto', got {steps!r}"
        )
    error = _error(post("/v1/embeddings", {"input": ["a", "", "c"]}), 422)
    assert error["param"] == "input.1"
    assert error["message"] == (
        "invalid request: input.1: Value error, an empty input has nothing to embed; send at least one character"
    )
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    error = _error(post("/v1/chat/completions", {**chat, "stop": ["ok", ""]}), 422)
    assert error["param"] == "stop.1" and "a stop string must have at least one character" in error["message"]
    error = _error(post("/v1/chat/completions", {**chat, "frequency_penalty": 2.5}), 422)
    assert error["param"] == "frequency_penalty"


def test_a_body_that_is_not_utf8_says_so(served):
    body = b'{"input": "caf\xe9"}'  # latin-1, not UTF-8
    response = httpx.post(served.url + "/v1/embeddings", content=body, headers={"content-type": "application/json"})
    error = _error(response, 400)
    assert error["param"] == "body" and error["code"] == "invalid_json"
    assert error["message"] == (
        "the request body is not valid UTF-8 JSON: byte 0xe9 at position 14 is not UTF-8; "
        "send the JSON encoded as UTF-8"
    )


def test_openai_client_raises_with_the_server_message(openai_client):
    with pytest.raises(openai.UnprocessableEntityError, match="at least 1 item"):
        openai_client.embeddings.create(input=[], model="m")


def test_unknown_routes_and_models_are_404(served):
    error = _error(httpx.get(served.url + "/v1/nothing"), 404)
    assert "no route GET /v1/nothing" in error["message"]
    _error(httpx.get(served.url + "/v1/models/some-other-model"), 404)
    _error(httpx.get(served.url + "/v1/embeddings"), 405)


def test_limits_give_413(serve_tiny):
    # tiny-model prompts: 24 template tokens + the text ("The quick ... dog." is 18, "word " * 10 is 40)
    with serve_tiny(max_inputs=3, max_input_tokens=45, max_request_tokens=100) as s:
        post = lambda path, body: httpx.post(s.url + path, json=body, timeout=60)  # noqa: E731
        error = _error(post("/v1/embeddings", {"input": ["a", "b", "c", "d"]}), 413)
        assert error["code"] == "too_many_inputs" and "at most 3" in error["message"]
        error = _error(post("/v1/embeddings", {"input": ["short", "word " * 10]}), 413)
        assert error["param"] == "input.1" and error["code"] == "too_many_tokens"
        error = _error(post("/v1/embeddings", {"input": ["The quick brown fox jumps over the lazy dog."] * 3}), 413)
        assert "max_request_tokens" in error["message"]
        error = _error(post("/v1/rerank", {"query": "q", "documents": ["d"] * 4}), 413)
        assert error["param"] == "documents"
        assert post("/v1/embeddings", {"input": ["a", "b", "c"]}).status_code == 200


def test_api_key_is_required_on_v1_when_set(serve_tiny):
    with serve_tiny(api_key="s3cret") as s:
        error = _error(httpx.post(s.url + "/v1/embeddings", json={"input": "x"}), 401)
        assert error["code"] == "invalid_api_key"
        wrong = {"Authorization": "Bearer nope"}
        _error(httpx.post(s.url + "/v1/embeddings", json={"input": "x"}, headers=wrong), 401)
        _error(httpx.post(s.url + "/v1/embeddings", json={"input": 5}, headers=wrong), 401)  # auth before body
        _error(httpx.get(s.url + "/v1/models"), 401)
        assert httpx.get(s.url + "/health").status_code == 200  # liveness and the page need no key
        assert httpx.get(s.url + "/").status_code == 200
        with pytest.raises(openai.AuthenticationError, match="incorrect API key"):
            openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0).embeddings.create(input="x", model="m")
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert len(good.embeddings.create(input="x", model="m").data[0].embedding) == s.reference.dim


def test_full_queue_gives_429_and_accepted_requests_still_finish(serve_tiny):
    with serve_tiny(max_queue=1) as s:
        gate = threading.Event()
        s.state.worker.submit(gate.wait, 30)  # occupy the model thread

        async def go():
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as client:
                running = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": "first"}))
                await _until(lambda: s.state.batcher.running == 1)
                waiting = asyncio.ensure_future(client.post("/v1/embeddings", json={"input": "second"}))
                await _until(lambda: s.state.batcher.queued == 1)
                refused = await client.post("/v1/embeddings", json={"input": "third"})
                chat = asyncio.ensure_future(
                    client.post(
                        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                    )
                )
                await _until(lambda: s.state.worker.active == 1)
                chat_refused = await client.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
                gate.set()
                return await running, await waiting, refused, await chat, chat_refused

        running, waiting, refused, chat, chat_refused = asyncio.run(go())
        error = _error(refused, 429)
        assert error["type"] == "rate_limit_error" and refused.headers["retry-after"] == "1"
        _error(chat_refused, 429)
        assert running.status_code == waiting.status_code == chat.status_code == 200


async def _until(condition, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)
