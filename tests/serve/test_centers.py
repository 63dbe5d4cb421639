"""Centering in the server: the named instructions' centers are ready before the first request, the
centers of other instructions are bounded, and ``center_named_only`` leaves those uncentered."""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import pytest
from fastapi.testclient import TestClient

import genembed
from genembed.encoders import center_files
from genembed.encoders.centering import center_cache
from genembed.model import GenerativeEmbedder
from genembed.serve import ServeSettings, create_app

TEXTS = ["The quick brown fox.", "Paris is the capital of France.", "I loved this film."]


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv(center_files.CACHE_ENV, "off")  # every center not in memory is computed


def _centering(backbone) -> GenerativeEmbedder:
    return GenerativeEmbedder(copy.deepcopy(backbone), center=True)  # K=5, the server's default too


def _embed(client, **body) -> np.ndarray:
    response = client.post("/v1/embeddings", json={"input": TEXTS, **body})
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


def test_named_centers_are_ready_before_the_first_request(_tiny_backbone):
    model = _centering(_tiny_backbone)
    app = create_app(model, ServeSettings())
    cache = center_cache(model.backbone)
    assert cache.computed == 0  # nothing before start-up
    with TestClient(app) as client:
        named = set(app.state.genembed.instructions.values())
        assert cache.computed == len(named) and len(named) == 5
        got = _embed(client, input_type="classification")
        assert cache.computed == len(named)  # the first request computed no center
        reference = _centering(_tiny_backbone)
        instruction = app.state.genembed.instructions["classification"]
        np.testing.assert_allclose(got, reference.encode(TEXTS, instruction=instruction), atol=1e-5)


def test_centers_stored_with_the_model_are_not_computed_at_start(_tiny_backbone, tmp_path):
    model = _centering(_tiny_backbone)
    model.prompts.update(classification="Classify the given text.", clustering="Group by topic.")
    loaded = genembed.load(model.save(tmp_path / "saved"))
    app = create_app(loaded, ServeSettings())
    with TestClient(app) as client:
        # stored: every name the server answers (the model's prompts are the one table of named instructions)
        assert center_cache(loaded.backbone).computed == 0
        _embed(client, input_type="clustering")
        _embed(client, input_type="search_query")
        _embed(client, task="text-matching")
        assert center_cache(loaded.backbone).computed == 0


def test_other_instructions_are_bounded_and_cannot_push_out_the_named_ones(_tiny_backbone):
    model = _centering(_tiny_backbone)
    app = create_app(model, ServeSettings(center_cache_size=2))
    cache = center_cache(model.backbone)
    with TestClient(app) as client:
        warmed = cache.computed
        for i in range(4):
            _embed(client, instruction=f"Ad-hoc task {i}.")
            assert len(cache) <= 2
        assert cache.computed == warmed + 4
        _embed(client, input_type="classification")
        _embed(client, instruction="Ad-hoc task 3.")  # among the latest two
        assert cache.computed == warmed + 4


def test_center_named_only_leaves_other_instructions_uncentered(_tiny_backbone):
    model = _centering(_tiny_backbone)
    app = create_app(model, ServeSettings(center_named_only=True))
    reference = _centering(_tiny_backbone)
    cache = center_cache(model.backbone)
    with TestClient(app) as client:
        warmed = cache.computed
        got = _embed(client, instruction="Ad-hoc task.")
        np.testing.assert_allclose(got, reference.encode(TEXTS, instruction="Ad-hoc task.", center=False), atol=1e-5)
        named = _embed(client, input_type="search_query")
        np.testing.assert_allclose(named, reference.encode_query(TEXTS), atol=1e-5)
        assert cache.computed == warmed and len(cache) == 0


def test_a_model_without_centering_warms_nothing(_tiny_backbone):
    model = GenerativeEmbedder(copy.deepcopy(_tiny_backbone))
    with TestClient(create_app(model, ServeSettings())):
        assert center_cache(model.backbone).computed == 0


def test_bad_cache_size_is_refused():
    with pytest.raises(ValueError, match="center_cache_size must be an int >= 0"):
        ServeSettings(center_cache_size=-1)


class _Holding:
    """Wraps the model thread's encode: records each batch (``("client", instruction)`` or
    ``("calibration", texts)``) and waits at a gate first, so a queue can build up."""

    def __init__(self, encode, *, hold_calibration_only: bool = False):
        import threading

        self.encode, self.log = encode, []
        self.gate = threading.Event()
        self.hold_calibration_only = hold_calibration_only

    def __call__(self, key, texts):
        from genembed.serve.centers import CalibrationKey

        calibration = isinstance(key, CalibrationKey)
        if calibration or not self.hold_calibration_only:
            self.gate.wait(30)
        self.log.append(("calibration", len(texts)) if calibration else ("client", key.instruction))
        return self.encode(key, texts)


async def _until(condition, what: str) -> None:
    import asyncio

    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


def test_a_new_instructions_calibration_takes_turns_with_other_requests(_tiny_backbone):
    import asyncio

    from genembed.serve.embeddings import embed_texts
    from genembed.serve.state import ServingState

    state = ServingState(_centering(_tiny_backbone), ServeSettings())
    holding = state._encode = _Holding(state._encode)  # the batcher calls the instance's _encode

    async def go():
        state.start()
        holding.gate.set()
        await state.worker.run(state.warm_up)
        holding.log.clear()
        holding.gate.clear()
        first = asyncio.ensure_future(embed_texts(state, ["Hold the model."], "", field="input"))
        await _until(lambda: state.batcher.running == 1, "the first request runs")
        new = asyncio.ensure_future(embed_texts(state, ["A fresh task."], "Ad-hoc task.", field="input"))
        await _until(lambda: state.batcher.queued_background == 64, "the calibration texts are queued")
        plain = asyncio.ensure_future(embed_texts(state, ["Plain text."], "", field="input"))
        await asyncio.sleep(0.05)
        assert state.centers.active == 1 and state.batcher.queued == 1
        holding.gate.set()
        (plain_vectors, _), calibration_left = await plain, state.batcher.queued_background
        await first
        new_vectors, _ = await new
        await state.close()
        return plain_vectors, calibration_left, new_vectors

    plain_vectors, calibration_left, new_vectors = asyncio.run(go())
    log = holding.log
    # the held request, one small calibration batch, the plain request, the rest of the calibration in
    # small batches, then the request that needed the center
    assert log[0] == ("client", "") and log[1][0] == "calibration" and log[2] == ("client", "")
    assert calibration_left > 0  # the plain request was answered before the calibration finished
    assert all(kind == "calibration" for kind, _ in log[3:-1]) and log[-1] == ("client", "Ad-hoc task.")
    calibration = [n for kind, n in log if kind == "calibration"]
    assert sum(calibration) == 64 and max(calibration) < 64
    reference = _centering(_tiny_backbone)
    np.testing.assert_allclose(plain_vectors, reference.encode(["Plain text."]), atol=1e-5)
    np.testing.assert_allclose(new_vectors, reference.encode(["A fresh task."], instruction="Ad-hoc task."), atol=1e-5)
    assert center_cache(state.model.backbone).computed == 5 + 1  # the named ones at start, then this one


def test_a_new_instructions_calibration_texts_are_tokenized_on_the_event_loop(_tiny_backbone, monkeypatch):
    """The calibration batches, like client batches, reach the model thread as (text, prompt) pairs: the
    model thread tokenizes nothing, computes the instruction's prefix once for all its batches, and the
    center is the one encode computes."""
    import asyncio
    import threading

    from genembed.encoders import prompts as prompts_mod
    from genembed.encoders.prefix_cache import prefix_cache
    from genembed.serve import state as state_mod
    from genembed.serve.embeddings import embed_texts
    from genembed.serve.state import ServingState

    state = ServingState(_centering(_tiny_backbone), ServeSettings())
    threads = []

    def counted(original):
        return lambda *a, **k: threads.append(threading.current_thread().name) or original(*a, **k)

    async def go():
        state.start()
        await state.worker.run(state.warm_up)  # the named centers: computed by encode, on the model thread
        monkeypatch.setattr(prompts_mod, "encode_prompts", counted(prompts_mod.encode_prompts))
        monkeypatch.setattr(state_mod, "encode_prompts", counted(state_mod.encode_prompts))
        before = (prefixes.hits, prefixes.misses)
        vectors, _ = await embed_texts(state, ["A fresh task."], "Ad-hoc task.", field="input")
        await state.close()
        return vectors, before

    prefixes = prefix_cache(state.model.backbone.model)
    vectors, (hits, misses) = asyncio.run(go())
    assert threads and not [name for name in threads if name.startswith("genembed-model")]
    # one prefix computed; every later forward pass (calibration batches, then the client's) reused it
    assert state.batcher.background_batches >= 2
    assert prefixes.misses - misses == 1 and prefixes.hits - hits >= state.batcher.background_batches
    reference = _centering(_tiny_backbone)
    np.testing.assert_allclose(vectors, reference.encode(["A fresh task."], instruction="Ad-hoc task."), atol=1e-5)


def _wait_for(condition) -> None:
    import time

    for _ in range(1000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("timed out")


def test_a_full_centring_queue_answers_429_with_retry_after(_tiny_backbone):
    import threading

    import httpx

    from genembed.serve import running_server

    app = create_app(_centering(_tiny_backbone), ServeSettings(max_centering=1, max_centering_queue=1))
    state = app.state.genembed
    holding = state._encode = _Holding(state._encode, hold_calibration_only=True)
    with running_server(app) as (url, _):
        answers = {}

        def post(name: str, instruction: str) -> None:
            body = {"input": "x", "instruction": instruction}
            answers[name] = httpx.post(f"{url}/v1/embeddings", json=body, timeout=60)

        threads = [threading.Thread(target=post, args=(n, f"Task {n}.")) for n in ("a", "b")]
        threads.append(threading.Thread(target=post, args=("a again", "Task a.")))  # shares a's center
        threads[0].start()
        _wait_for(lambda: state.centers.active == 1)  # a is being centred (held at the gate)
        for thread in threads[1:]:
            thread.start()
        _wait_for(lambda: state.centers.waiting == 1 and len(state.centers._pending) == 2)
        refused = httpx.post(f"{url}/v1/embeddings", json={"input": "x", "instruction": "Task c."}, timeout=60)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "1"  # no center timed yet
        error = refused.json()["error"]
        assert error["code"] == "queue_full" and "1 new instruction(s) are being centred and 1 wait" in error["message"]
        holding.gate.set()
        for thread in threads:
            thread.join(60)
        assert {name: r.status_code for name, r in answers.items()} == {"a": 200, "b": 200, "a again": 200}
        assert answers["a"].json()["data"] == answers["a again"].json()["data"]
        health = httpx.get(f"{url}/health").json()
        assert health["centering_instructions"] == 0 and health["queued_centering"] == 0
        assert health["background_batches"] >= 2
        assert state.centers.last_seconds is not None
        again = httpx.post(f"{url}/v1/embeddings", json={"input": "x", "instruction": "Task c."}, timeout=60)
        assert again.status_code == 200  # the budget is free again


def test_centring_budget_settings_are_checked():
    with pytest.raises(ValueError, match="max_centering must be a positive int"):
        ServeSettings(max_centering=0)
    with pytest.raises(ValueError, match="max_centering_queue must be an int >= 0"):
        ServeSettings(max_centering_queue=-1)


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _HeldBatcher:
    """An :class:`EmbeddingBatcher` stand-in whose background jobs wait until ``release()`` and whose
    centring estimate is what the test sets (``estimate``: seconds, or None for no timing yet)."""

    def __init__(self, estimate: float | None):
        self.estimate = estimate
        self.asked: list[int] = []
        self.jobs = 0
        self._gate: asyncio.Event | None = None

    def background_seconds(self, tokens: int) -> float | None:
        self.asked.append(tokens)
        return self.estimate

    async def submit(self, texts, *, key, cost, background=False):
        assert background
        self._gate = self._gate or asyncio.Event()
        self.jobs += 1
        await self._gate.wait()
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def release(self) -> None:
        self._gate.set()


def _scheduler(backbone, batcher, clock, *, max_wait=15.0, max_queue=2):
    from genembed.encoders.settings import EmbedSettings
    from genembed.serve.centers import CenterScheduler

    def items(texts, instruction, steps):
        return [(t, None) for t in texts], [10] * len(texts)  # 10 tokens per calibration text

    scheduler = CenterScheduler(
        backbone, batcher, items, max_active=1, max_queue=max_queue, max_wait=max_wait, clock=clock
    )
    return scheduler, EmbedSettings()


def test_a_center_expected_later_than_the_bound_is_refused_at_once_and_still_computed(_tiny_backbone):
    from genembed.serve.centers import CenteringBusyError

    backbone = copy.deepcopy(_tiny_backbone)
    batcher, clock = _HeldBatcher(estimate=40.0), _FakeClock()

    async def go():
        scheduler, settings = _scheduler(backbone, batcher, clock)
        with pytest.raises(CenteringBusyError) as refused:
            await scheduler.center(settings, "A new task.", 5)
        assert batcher.asked == [640]  # 64 calibration texts of 10 tokens, nothing queued before them
        await _until(lambda: batcher.jobs == 64, "the calibration is queued anyway")
        clock.now = 30.0  # 10 s before it is expected: a second request is refused too, with the time left
        with pytest.raises(CenteringBusyError) as again:
            await scheduler.center(settings, "A new task.", 5)
        batcher.release()
        await _until(lambda: not scheduler._pending, "the center is computed")
        found = await scheduler.center(settings, "A new task.", 5)  # the retry finds it at once
        return refused.value, again.value, found

    refused, again, found = asyncio.run(go())
    assert refused.retry_after == 40 and again.retry_after == 10
    assert "expected to take 40 s" in str(refused) and "more than the server waits (15 s" in str(refused)
    assert found.shape == (4,)


def test_a_center_expected_within_the_bound_is_waited_for(_tiny_backbone):
    backbone = copy.deepcopy(_tiny_backbone)
    batcher, clock = _HeldBatcher(estimate=14.0), _FakeClock()

    async def go():
        scheduler, settings = _scheduler(backbone, batcher, clock)
        waiting = asyncio.ensure_future(scheduler.center(settings, "A new task.", 5))
        await _until(lambda: batcher.jobs == 64, "the calibration is queued")
        assert not waiting.done()
        # a second new instruction queues behind the first: its estimate counts the first one's tokens
        second = asyncio.ensure_future(scheduler.center(settings, "Another task.", 5))
        await asyncio.sleep(0.01)
        batcher.release()
        return await waiting, await second

    first, second = asyncio.run(go())
    assert first.shape == (4,) and second.shape == (4,)
    assert batcher.asked == [640, 640]  # the first had started (its texts are the batcher's to count)


def test_a_center_not_ready_at_the_bound_answers_429_then(_tiny_backbone):
    from genembed.serve.centers import CenteringBusyError

    backbone = copy.deepcopy(_tiny_backbone)
    batcher, clock = _HeldBatcher(estimate=None), _FakeClock()  # no batch timed yet: no estimate

    async def go():
        scheduler, settings = _scheduler(backbone, batcher, clock, max_wait=0.05)
        with pytest.raises(CenteringBusyError) as late:
            await scheduler.center(settings, "A new task.", 5)
        pending = len(scheduler._pending)
        batcher.release()
        await _until(lambda: not scheduler._pending, "the center is computed")
        return late.value, pending

    late, pending = asyncio.run(go())
    assert pending == 1  # still being computed after the refusal
    assert "was not ready within 0.05 s" in str(late) and late.retry_after == 1


def test_the_batcher_estimates_background_time_from_its_timed_batches():
    from genembed.serve.batcher import EmbeddingBatcher

    clock = _FakeClock()

    def encode(key, texts):
        clock.now += 0.01 * len(texts) * 5  # 0.01 s per token, 5 tokens a text
        return np.zeros((len(texts), 2), dtype=np.float32)

    async def run(fn, *args):
        return fn(*args)

    async def go():
        batcher = EmbeddingBatcher(encode, run, max_batch_tokens=100, max_batch_requests=8, max_queue=8, clock=clock)
        before = batcher.background_seconds(100)
        batcher.start()
        await batcher.submit(["a", "b"], key="k", cost=10)
        idle = batcher.background_seconds(100)
        batcher.running = 1  # a client batch runs: background work gets its guaranteed third
        contended = batcher.background_seconds(100)
        batcher.running = 0
        await batcher.close()
        return before, idle, contended

    before, idle, contended = asyncio.run(go())
    assert before is None
    assert idle == pytest.approx(1.0) and contended == pytest.approx(3.0)


def test_the_centring_wait_setting_is_checked():
    for bad in (0, -1.0, float("inf"), "15", True):
        with pytest.raises(ValueError, match="max_centering_wait must be a positive number of seconds"):
            ServeSettings(max_centering_wait=bad)
    assert ServeSettings().max_centering_wait <= 15
