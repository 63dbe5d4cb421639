"""Many clients at once: every request answered with its own embeddings; shutdown drains accepted work."""

from __future__ import annotations

import asyncio
import random
import threading

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.integration

WORDS = ["fox", "dog", "guitar", "stage", "capital", "France", "movie", "product", "river", "light", "sugar", "tax"]


def _requests(n: int, seed: int = 0) -> list[dict]:
    """Distinct requests of 1-3 texts, mixing instructions and steps (which cannot share a batch)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        texts = [f"{i} " + " ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(rng.randint(1, 3))]
        body = {"input": texts, "encoding_format": "float"}
        if i % 3 == 1:
            body["instruction"] = "Retrieve semantically similar text."
        if i % 4 == 2:
            body["steps"] = 2
        out.append(body)
    return out


def _expected(reference, body: dict) -> np.ndarray:
    return reference.encode(body["input"], instruction=body.get("instruction"), steps=body.get("steps", 5))


async def _post_all(url: str, bodies: list[dict]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        return await asyncio.gather(*(client.post("/v1/embeddings", json=b) for b in bodies))


def test_concurrent_requests_are_batched_and_none_is_lost_or_mixed_up(served):
    before = served.state.batcher.batched_requests
    bodies = _requests(64)
    responses = asyncio.run(_post_all(served.url, bodies))
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200, response.text
        got = np.array([d["embedding"] for d in response.json()["data"]])
        np.testing.assert_allclose(got, _expected(served.reference, body), atol=1e-5)
    batcher = served.state.batcher
    assert batcher.batched_requests - before == 64
    assert batcher.largest_batch > 1  # concurrent requests shared forward passes


def test_shutdown_finishes_accepted_requests(serve_tiny):
    bodies = _requests(24, seed=1)
    with serve_tiny() as s:
        gate = threading.Event()
        s.state.worker.submit(gate.wait, 30)  # hold the model thread so every request is still pending

        async def go():
            sending = asyncio.ensure_future(_post_all(s.url, bodies))
            batcher, loop = s.state.batcher, asyncio.get_running_loop()
            deadline = loop.time() + 30
            while batcher.queued + batcher.running < len(bodies):  # wait until all are accepted
                assert loop.time() < deadline and not sending.done()
                await asyncio.sleep(0.005)
            s.server.should_exit = True  # what SIGTERM does
            await asyncio.sleep(0.3)
            assert batcher.queued > 0 and not sending.done()  # still draining
            with pytest.raises(httpx.ConnectError):  # nothing new is accepted
                await httpx.AsyncClient(base_url=s.url).post("/v1/embeddings", json={"input": "late"})
            gate.set()
            return await sending

        responses = asyncio.run(go())
        for body, response in zip(bodies, responses, strict=True):
            assert response.status_code == 200, response.text
            got = np.array([d["embedding"] for d in response.json()["data"]])
            np.testing.assert_allclose(got, _expected(s.reference, body), atol=1e-5)
