"""Prometheus metrics at ``GET /metrics`` (prometheus_client, one registry per app).

=====================================================  =====================================================
metric                                                 meaning
=====================================================  =====================================================
``genembed_requests_total{method,route,status}``       HTTP requests answered (route: the path template)
``genembed_request_duration_seconds{method,route}``    time from request to the last byte of the response
``genembed_embedding_batch_requests``                  requests per embedding micro-batch
``genembed_embedding_batch_texts``                     texts per embedding micro-batch
``genembed_queue_depth{queue}``                        ``embedding``: requests waiting for a batch;
                                                       ``generation``: chat/rerank/inspect requests admitted
``genembed_tokens_total{api,kind}``                    ``prompt`` tokens read and ``completion`` tokens written
                                                       (api: ``embeddings``, ``rerank``, ``chat``)
=====================================================  =====================================================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["MetricsMiddleware", "ServeMetrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServeMetrics:
    """The server's metrics, in a registry of its own (several apps can live in one process)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "genembed_requests", "HTTP requests answered", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "genembed_request_duration_seconds",
            "Seconds from the request to the end of its response",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "genembed_embedding_batch_requests",
            "Requests per embedding micro-batch",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.batch_texts = Histogram(
            "genembed_embedding_batch_texts", "Texts per embedding micro-batch", buckets=_BATCH_BUCKETS, registry=r
        )
        self.queue_depth = Gauge("genembed_queue_depth", "Requests waiting or admitted", ["queue"], registry=r)
        self.tokens = Counter(
            "genembed_tokens", "Tokens read (prompt) and written (completion)", ["api", "kind"], registry=r
        )

    def watch_queues(self, embedding: Callable[[], float], generation: Callable[[], float]) -> None:
        """Read the queue depths when scraped."""
        self.queue_depth.labels("embedding").set_function(embedding)
        self.queue_depth.labels("generation").set_function(generation)

    def observe_batch(self, requests: int, texts: int) -> None:
        """Record one embedding micro-batch."""
        self.batch_requests.observe(requests)
        self.batch_texts.observe(texts)

    def count_tokens(self, api: str, kind: str, n: int) -> None:
        """Add ``n`` tokens of ``kind`` (``prompt`` or ``completion``) read or written by ``api``."""
        self.tokens.labels(api, kind).inc(n)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4


def _route_template(scope: dict[str, Any]) -> str | None:
    # FastAPI >= 0.16x includes routers lazily: the matched route keeps its own path ("/rerank") and the
    # full template ("/v2/rerank") lives in the effective route context; older versions copy routes
    # with the full path.
    context = (
        scope.get("fastapi", {}).get("effective_route_context") if isinstance(scope.get("fastapi"), dict) else None
    )
    return getattr(context, "path", None) or getattr(scope.get("route"), "path", None)


class MetricsMiddleware:
    """ASGI middleware counting every HTTP request by route template and status, with its latency.

    The route is the matched path template (``/v1/models/{model_id:path}``), so ids in paths do not
    multiply the series; paths no route matched count as ``unmatched``.
    """

    def __init__(self, app: Any, metrics: ServeMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # unless a response starts: an exception escaped every handler

        async def send_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = _route_template(scope)
            if route is None:
                route = "/static" if scope.get("path", "").startswith("/static/") else "unmatched"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
