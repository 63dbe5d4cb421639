"""Fixtures for the server tests: a real uvicorn server on a free loopback port, serving the tiny
model, and a second copy of the same model for computing expected results directly (the served copy
belongs to the server's model thread)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class Served:
    url: str  # http://127.0.0.1:PORT
    server: Any  # uvicorn.Server; set should_exit to shut it down
    state: Any  # the app's ServingState (batcher counters, worker)
    reference: Any  # a GenerativeEmbedder with the same weights, for direct computation


@contextmanager
def serving(backbone: Any, **settings: Any) -> Iterator[Served]:
    """Serve a copy of ``backbone`` with ``ServeSettings(**settings)`` until the block ends."""
    from genembed.model import GenerativeEmbedder
    from genembed.serve import ServeSettings, create_app, running_server

    app = create_app(GenerativeEmbedder(copy.deepcopy(backbone)), ServeSettings(**settings))
    with running_server(app) as (url, server):
        yield Served(url, server, app.state.genembed, GenerativeEmbedder(copy.deepcopy(backbone)))


@pytest.fixture(scope="module")
def served(_tiny_backbone) -> Iterator[Served]:
    """The tiny model served with default settings (shared by a test module)."""
    with serving(_tiny_backbone) as s:
        yield s


@pytest.fixture
def serve_tiny(_tiny_backbone):
    """``serve_tiny(**settings)``: a context manager serving the tiny model with those settings."""
    return lambda **settings: serving(_tiny_backbone, **settings)


@pytest.fixture(scope="module")
def openai_client(served):
    import openai

    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    yield client
    client.close()
