"""Operating the server: Prometheus /metrics, /info, /tokenize, opt-in CORS, and which routes the
API key guards."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.integration


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` from the exposition text, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_metrics_count_requests_latency_batches_and_tokens(serve_tiny):
    with serve_tiny() as s:
        ok = httpx.post(s.url + "/v1/embeddings", json={"input": ["one text", "and another"]}, timeout=60).json()
        assert httpx.post(s.url + "/v1/embeddings", json={"input": []}).status_code == 422
        assert httpx.get(s.url + "/v1/models/someone-else").status_code == 404
        assert httpx.get(s.url + "/nowhere").status_code == 404
        chat = httpx.post(
            s.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        ).json()
        rerank = httpx.post(s.url + "/v2/rerank", json={"query": "q", "documents": ["a", "b"]}, timeout=60).json()
        m = _metrics(s.url)
        requests = "genembed_requests_total"
        assert m[(requests, _labels(method="POST", route="/v1/embeddings", status="200"))] == 1
        assert m[(requests, _labels(method="POST", route="/v1/embeddings", status="422"))] == 1
        assert m[(requests, _labels(method="GET", route="/v1/models/{model_id:path}", status="404"))] == 1
        assert m[(requests, _labels(method="GET", route="unmatched", status="404"))] == 1
        assert m[(requests, _labels(method="POST", route="/v2/rerank", status="200"))] == 1
        latency = ("genembed_request_duration_seconds_count", _labels(method="POST", route="/v1/embeddings"))
        assert m[latency] == 2
        assert m[("genembed_embedding_batch_requests_count", ())] == 1
        assert m[("genembed_embedding_batch_texts_sum", ())] == 2
        tokens = "genembed_tokens_total"
        assert m[(tokens, _labels(api="embeddings", kind="prompt"))] == ok["usage"]["prompt_tokens"]
        assert m[(tokens, _labels(api="chat", kind="prompt"))] == chat["usage"]["prompt_tokens"]
        assert m[(tokens, _labels(api="chat", kind="completion"))] == chat["usage"]["completion_tokens"]
        assert m[(tokens, _labels(api="rerank", kind="prompt"))] == rerank["meta"]["tokens"]["input_tokens"]
        assert m[("genembed_queue_depth", _labels(queue="embedding"))] == 0


def test_metrics_report_queue_depth(serve_tiny):
    with serve_tiny() as s:
        gate = threading.Event()
        s.state.worker.submit(gate.wait, 30)  # occupy the model thread
        answers: list[int] = []
        post = lambda: answers.append(httpx.post(s.url + "/v1/embeddings", json={"input": "x"}, timeout=60).status_code)  # noqa: E731
        threads = [threading.Thread(target=post) for _ in range(3)]
        threads[0].start()
        _wait_for(lambda: s.state.batcher.running == 1)  # the first request's batch waits for the model thread
        for t in threads[1:]:
            t.start()
        _wait_for(lambda: s.state.batcher.queued == 2)  # the other two wait for the next batch
        assert _metrics(s.url)[("genembed_queue_depth", _labels(queue="embedding"))] == 2
        gate.set()
        for t in threads:
            t.join()
        assert answers == [200, 200, 200]


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_info_describes_the_served_model(served):
    import genembed
    from genembed.encoders.instructions import NAMED_INSTRUCTIONS
    from genembed.serve.instructions import INPUT_TYPES, TASKS

    info = httpx.get(served.url + "/info").json()
    assert info["model"] == served.reference.name and info["version"] == genembed.__version__
    assert info["dimension"] == served.reference.dim
    assert (info["method"], info["default_steps"], info["max_steps"]) == ("gircse", 5, 20)
    assert info["instructions"] == NAMED_INSTRUCTIONS
    assert info["input_types"] == INPUT_TYPES and info["tasks"] == TASKS
    assert info["token_encoding"] == "model" and info["default_rerank_scoring"] == "query_likelihood"
    assert set(info["rerank_scorings"]) == {"query_likelihood", "yes_no"}
    assert info["device"] == "cpu" and info["dtype"] == "float32"
    from genembed.serve.settings import CENTERING_LIMITS, LIMITS, ServeSettings

    assert info["limits"] == {name: getattr(ServeSettings(), name) for name in info["limits"]}
    assert set(LIMITS) | set(CENTERING_LIMITS) == set(info["limits"])
    assert info["generation_weights"] == f"{served.reference.backbone.name} (base weights)"
    assert info.get("generation_note") is None  # no adapter: nothing better to say


def test_info_notes_replies_from_the_raw_backbone_beside_an_embedding_adapter(tiny):
    from fastapi.testclient import TestClient
    from peft import LoraConfig, get_peft_model

    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app

    tiny.model = get_peft_model(tiny.model, LoraConfig(r=2, target_modules=["q_proj"])).eval()
    model = GenerativeEmbedder(tiny, adapter="gircse")
    with TestClient(create_app(model, ServeSettings())) as client:
        info = client.get("/info").json()
        assert info["generation_weights"] == f"{tiny.name} (base weights)"
        assert "adapter gircse is trained for embeddings only" in info["generation_note"]
        model.generation_adapter = True
        info = client.get("/info").json()
        assert info["generation_weights"] == f"{tiny.name} + adapter gircse" and info["generation_note"] is None


def test_tokenize(served):
    tok = served.reference.backbone.tokenizer
    texts = ["hello there", "Paris"]
    body = httpx.post(served.url + "/tokenize", json={"input": texts}).json()
    assert [d["ids"] for d in body["data"]] == tok(texts, add_special_tokens=False)["input_ids"]
    assert ["".join(d["tokens"]) for d in body["data"]] == texts
    assert body["usage"]["total_tokens"] == sum(len(d["ids"]) for d in body["data"])
    one = httpx.post(served.url + "/tokenize", json={"input": "hello there"}).json()
    assert one["data"][0]["ids"] == body["data"][0]["ids"]
    assert httpx.post(served.url + "/tokenize", json={"input": 3}).status_code == 422


def test_tokenize_limits(serve_tiny):
    with serve_tiny(max_inputs=2, max_request_tokens=10) as s:
        assert httpx.post(s.url + "/tokenize", json={"input": ["a", "b", "c"]}).status_code == 413
        error = httpx.post(s.url + "/tokenize", json={"input": "word " * 20}).json()["error"]
        assert error["code"] == "too_many_tokens" and "max_request_tokens" in error["message"]


def test_cors_is_off_by_default_and_opt_in(serve_tiny, served):
    origin = "https://app.example"
    plain = httpx.post(served.url + "/v1/embeddings", json={"input": "x"}, headers={"Origin": origin})
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers
    with serve_tiny(cors_origins=(origin,), api_key="k") as s:
        preflight = httpx.options(
            s.url + "/v1/embeddings",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == origin
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        answer = httpx.post(
            s.url + "/v1/embeddings", json={"input": "x"}, headers={"Origin": origin, "Authorization": "Bearer k"}
        )
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin
        other = httpx.options(
            s.url + "/v1/embeddings",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


def test_the_key_guards_the_api_but_not_probes(serve_tiny):
    with serve_tiny(api_key="k") as s:
        for method, path, body in [
            ("GET", "/info", None),
            ("POST", "/tokenize", {"input": "x"}),
            ("POST", "/v2/rerank", {"query": "q", "documents": ["d"]}),
            ("GET", "/v1/models", None),
        ]:
            response = httpx.request(method, s.url + path, json=body)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"] == "Bearer"
            ok = httpx.request(method, s.url + path, json=body, headers={"Authorization": "Bearer k"}, timeout=60)
            assert ok.status_code == 200, (path, ok.text)
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200


def test_favicon_answers_without_an_icon(serve_tiny):
    with serve_tiny(api_key="secret") as s:  # open like the page, which browsers load it for
        response = httpx.get(s.url + "/favicon.ico")
        assert response.status_code == 204 and response.content == b""
