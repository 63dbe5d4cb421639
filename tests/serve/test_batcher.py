"""The micro-batcher on its own, with a recording encoder (no model, no server)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from genembed.serve.batcher import BatcherClosedError, EmbeddingBatcher
from genembed.serve.worker import ModelWorker, QueueFullError


class Recorder:
    """Encodes a text as [len(text), key id]; records each batch; can be held to let a queue build up."""

    def __init__(self, fail_on: str | None = None):
        self.batches: list[tuple[object, list[str]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_on = fail_on

    def __call__(self, key, texts):
        self.gate.wait(10)
        self.batches.append((key, list(texts)))
        if self.fail_on in texts:
            raise ValueError(f"cannot encode {self.fail_on!r}")
        return np.array([[len(t), hash(key) % 97] for t in texts], dtype=np.float32)


def _run(coro):
    return asyncio.run(coro)


async def _with_batcher(recorder, fn, **limits):
    worker = ModelWorker(max_active=8)
    options = {"max_batch_tokens": 100, "max_batch_requests": 8, "max_queue": 64, **limits}
    batcher = EmbeddingBatcher(recorder, worker.run, **options)
    batcher.start()
    try:
        return await fn(batcher)
    finally:
        recorder.gate.set()
        await batcher.close()
        worker.shutdown()


async def _occupy(recorder, batcher, text: str = "x"):
    """Hold the model thread with a one-text batch; later submissions queue behind it."""
    recorder.gate.clear()
    first = asyncio.ensure_future(batcher.submit([text], key="k", cost=1))
    await asyncio.sleep(0.05)  # the batcher has taken it: the batch is running (held)
    return first


async def _hold_then_submit(recorder, batcher, jobs):
    """Occupy the model thread, queue ``jobs`` behind it, then release: they batch together."""
    first = await _occupy(recorder, batcher)
    rest = [asyncio.ensure_future(batcher.submit(texts, key=key, cost=cost)) for texts, key, cost in jobs]
    await asyncio.sleep(0.05)
    recorder.gate.set()
    return await first, await asyncio.gather(*rest)


def test_waiting_requests_share_a_batch_and_get_their_own_rows():
    rec = Recorder()
    jobs = [(["aa", "bbb"], "k", 10), (["c"], "k", 10), (["dddd"], "k", 10)]
    first, results = _run(_with_batcher(rec, lambda b: _hold_then_submit(rec, b, jobs)))
    assert [k for k, _ in rec.batches] == ["k", "k"]
    assert rec.batches[1][1] == ["aa", "bbb", "c", "dddd"]  # one batch, request order kept
    assert [r[:, 0].tolist() for r in results] == [[2, 3], [1], [4]]
    assert first[:, 0].tolist() == [1]


def test_token_budget_and_request_cap_split_batches():
    rec = Recorder()
    jobs = [([f"t{i}"], "k", 40) for i in range(5)]  # 40 tokens each, budget 100 -> 2 per batch
    _run(_with_batcher(rec, lambda b: _hold_then_submit(rec, b, jobs)))
    assert [texts for _, texts in rec.batches[1:]] == [["t0", "t1"], ["t2", "t3"], ["t4"]]

    rec = Recorder()
    _run(
        _with_batcher(
            rec, lambda b: _hold_then_submit(rec, b, [([f"u{i}"], "k", 1) for i in range(3)]), max_batch_requests=1
        )
    )
    assert [texts for _, texts in rec.batches[1:]] == [["u0"], ["u1"], ["u2"]]  # batching off


def test_only_requests_with_the_same_settings_share_a_batch():
    rec = Recorder()
    jobs = [(["a"], ("", 5), 1), (["b"], ("q", 5), 1), (["c"], ("", 5), 1), (["d"], ("", 2), 1)]
    _, results = _run(_with_batcher(rec, lambda b: _hold_then_submit(rec, b, jobs)))
    assert rec.batches[1:] == [(("", 5), ["a", "c"]), (("q", 5), ["b"]), (("", 2), ["d"])]
    assert [int(r[0, 1]) for r in results] == [hash(k) % 97 for _, k, _ in jobs]


def test_a_failing_request_does_not_fail_its_batch_mates():
    rec = Recorder(fail_on="bad")

    async def go(batcher):
        first = await _occupy(rec, batcher)
        good = asyncio.ensure_future(batcher.submit(["good"], key="k", cost=1))
        bad = asyncio.ensure_future(batcher.submit(["bad"], key="k", cost=1))
        await asyncio.sleep(0.05)
        rec.gate.set()
        await first
        assert (await good)[:, 0].tolist() == [4]
        with pytest.raises(ValueError, match="cannot encode 'bad'"):
            await bad

    _run(_with_batcher(rec, go))
    assert [texts for _, texts in rec.batches[1:]] == [["good", "bad"], ["good"], ["bad"]]


def test_full_queue_refuses_and_close_drains_accepted_requests():
    rec = Recorder()

    async def go(batcher):
        running = await _occupy(rec, batcher, "r")
        waiting = [asyncio.ensure_future(batcher.submit([f"w{i}"], key="k", cost=1)) for i in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFullError, match="2 embedding requests are already waiting"):
            await batcher.submit(["over"], key="k", cost=1)
        closing = asyncio.ensure_future(batcher.close())
        await asyncio.sleep(0.01)
        with pytest.raises(BatcherClosedError):
            await batcher.submit(["late"], key="k", cost=1)
        rec.gate.set()
        await closing
        return await running, await asyncio.gather(*waiting)

    running, waiting = _run(_with_batcher(rec, go, max_queue=2))
    assert running[:, 0].tolist() == [1] and [w[:, 0].tolist() for w in waiting] == [[2], [2]]
    assert [texts for _, texts in rec.batches] == [["r"], ["w0", "w1"]]


def test_abandoned_requests_are_skipped():
    rec = Recorder()

    async def go(batcher):
        first = await _occupy(rec, batcher)
        gone = asyncio.ensure_future(batcher.submit(["gone"], key="k", cost=1))
        kept = asyncio.ensure_future(batcher.submit(["kept"], key="k", cost=1))
        await asyncio.sleep(0.01)
        gone.cancel()  # the client disconnected
        await asyncio.sleep(0.01)
        rec.gate.set()
        await first
        return await kept

    assert _run(_with_batcher(rec, go))[:, 0].tolist() == [4]
    assert [texts for _, texts in rec.batches] == [["x"], ["kept"]]


async def _submit_background(batcher, n: int, cost: int, key="c"):
    jobs = [asyncio.ensure_future(batcher.submit([f"c{i}"], key=key, cost=cost, background=True)) for i in range(n)]
    await asyncio.sleep(0.01)
    return jobs


def test_background_batches_take_turns_with_client_batches_and_stay_small():
    rec = Recorder()

    async def turns(batcher):
        rec.gate.clear()
        held = asyncio.ensure_future(batcher.submit(["held"], key="k", cost=4))
        await asyncio.sleep(0.05)
        background = await _submit_background(batcher, 6, cost=1)
        clients = [asyncio.ensure_future(batcher.submit([t], key=t, cost=4)) for t in ("a", "b")]
        await asyncio.sleep(0.05)
        assert batcher.queued == 2 and batcher.queued_background == 6
        rec.gate.set()
        await asyncio.gather(held, *clients, *background)
        return batcher

    batcher = _run(_with_batcher(rec, turns))
    # after each client batch of cost 4, a background batch of at most half its cost (2 jobs), in turn
    assert [texts for _, texts in rec.batches] == [
        ["held"],
        ["c0", "c1"],
        ["a"],
        ["c2", "c3"],
        ["b"],
        ["c4", "c5"],
    ]
    assert batcher.batches == 3 and batcher.background_batches == 3


def test_background_work_alone_runs_back_to_back_in_growing_batches_and_is_not_refused_by_a_full_queue():
    rec = Recorder()

    async def go(batcher):
        rec.gate.clear()
        background = await _submit_background(batcher, 21, cost=50)  # more than max_queue=1
        assert batcher.queued_background >= 2
        rec.gate.set()
        return await asyncio.gather(*background)

    rows = _run(_with_batcher(rec, go, max_queue=1, max_batch_tokens=1000, max_batch_requests=64))
    assert [r[:, 0].tolist() for r in rows] == [[len(f"c{i}")] for i in range(21)]
    # one job (no client batch yet to size it by), then four times the tokens each time while no client waits
    assert [len(texts) for _, texts in rec.batches] == [1, 4, 16]


def test_a_client_waits_for_one_background_batch_at_most():
    rec = Recorder()

    async def go(batcher):
        await _hold_then_submit(rec, batcher, [(["big"], "k", 40)])  # a client batch of cost 40 ran last
        rec.gate.clear()
        background = await _submit_background(batcher, 30, cost=3)  # 20 tokens per background batch: 6 jobs
        client = asyncio.ensure_future(batcher.submit(["late"], key="k", cost=40))
        await asyncio.sleep(0.05)
        rec.gate.set()
        await client
        done = sum(job.done() for job in background)
        await asyncio.gather(*background)
        return done

    done = _run(_with_batcher(rec, go, idle_after=0.0))  # grow as soon as no client waits
    texts = [t for _, t in rec.batches]
    assert texts.index(["late"]) == 3  # x, big, one background batch, late
    assert texts[2] == [f"c{i}" for i in range(6)] and done == 6
    after = [len(t) for t in texts[4:]]  # nobody waits any more: 20 tokens, then 80 (8 jobs at most)
    assert sum(after) == 24 and after == [6, 8, 8, 2]


def test_background_batches_grow_only_once_clients_have_been_away_a_while():
    """A closed-loop client leaves the model free for a moment between requests: background batches
    stay at half a client batch until ``idle_after`` seconds have passed without one."""
    rec = Recorder()
    clock = [0.0]

    async def go(batcher):
        await _hold_then_submit(rec, batcher, [(["big"], "k", 40)])  # a client batch of cost 40 ran last
        background = await _submit_background(batcher, 12, cost=3)  # 20 tokens per batch: 6 jobs
        await asyncio.gather(*background)
        small = [len(t) for _, t in rec.batches[2:]]
        clock[0] = 1.5  # no client batch for longer than idle_after (1 s)
        more = await _submit_background(batcher, 30, cost=3)
        await asyncio.gather(*more)
        return small, [len(t) for _, t in rec.batches[2 + len(small) :]]

    small, later = _run(_with_batcher(rec, go, clock=lambda: clock[0]))
    assert small == [6, 6]  # within a second of the client batch: no growth
    assert later == [8, 8, 8, 6]  # then four times the tokens at once (8 jobs at most per batch)


def test_close_finishes_background_work():
    rec = Recorder()

    async def go(batcher):
        rec.gate.clear()
        background = await _submit_background(batcher, 2, cost=1)
        closing = asyncio.ensure_future(batcher.close())
        await asyncio.sleep(0.01)
        rec.gate.set()
        await closing
        return await asyncio.gather(*background)

    assert len(_run(_with_batcher(rec, go))) == 2
