"""Does one client's stream of new instructions slow another client down? Latency of a plain embedding
request to ``genembed serve`` with and without a client that sends a never-seen instruction every second.

With centering (on for the shipped adapter), a new instruction needs its center: 64 calibration texts
embedded with it. The server runs that work as background batches that take turns with the client
batches (:mod:`genembed.serve.centers`). This script starts one server subprocess (one torch thread,
an empty center disk cache, so every new instruction is computed) and measures the plain client's
latency in two conditions, alternated as idle, stream, stream, idle so both see the same machine
conditions:

- idle: the plain client alone, one request after another (a closed loop), each request
  ``--plain-texts`` STS-B sentences with no instruction (a named one: its center is ready at start-up);
- stream: the same, while a second client sends one sentence with a fresh instruction every
  ``--interval`` seconds (open loop: on time whether or not the previous one was answered).

Then a last phase, ``saturated``: ``--saturating-clients`` plain clients (4) each send
``--saturating-requests`` requests one after another, keeping the server busy, while the instruction
client sends a fresh instruction every ``--saturated-interval`` seconds.

The targets (issues 55 and 62): the plain client's p99 under the stream at most 2x its idle p99; under
saturation, every new instruction answered within the server's ``max_centering_wait`` (15 s) or refused
at once with 429. Records what the instruction client got in both (answers, 429 refusals of the
centring budget or bound, latency). Writes
``serve_fairness.json`` (config, git commit, numbers) and ``serve_fairness.md``.

Run (loads the default model once; about 6 minutes on 2 CPU cores; quiet machine for the numbers):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/serve_fairness.py --out benchmarks/results

Small setting (any model folder; a random tiny one needs ``--extra=--adapter=none --extra=--center``):

    .venv/bin/python benchmarks/serve_fairness.py --model DIR --requests 8 --out /tmp/fairness
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from _run_info import REPO, git_commit
from serve_load import STSB, Server, _sentences

from genembed.serve.settings import ServeSettings

PHASES = ("idle", "stream", "stream", "idle")  # alternated: slow drift in machine load cancels out
SATURATED = "saturated"  # the last phase: plain clients keep the server busy, new instructions arrive


def fresh_instruction(i: int) -> str:
    """The ``i``-th never-seen instruction of a run."""
    topics = ("sports", "finance", "health", "travel", "music", "science", "cooking", "law")
    return f"Given a text, decide whether it is about {topics[i % len(topics)]} (variant {i})."


async def _phase(
    url: str, plain: list[list[str]], fresh: list[str], interval: float, first: int = 0, clients: int = 1
) -> dict:
    """One phase: ``clients`` plain clients send ``plain`` (dealt out in turn), each one request after
    another; meanwhile the instruction client sends the ``fresh`` texts (none: no such client), each with
    a new instruction (numbered from ``first``), one every ``interval`` seconds until the plain clients
    are done."""
    import httpx

    plain_ms: list[float] = []
    fresh_results: list[tuple[int, float]] = []  # (status, ms)

    async def plain_client(http: httpx.AsyncClient, requests: list[list[str]]) -> None:
        for texts in requests:
            start = time.perf_counter()
            response = await http.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"})
            response.raise_for_status()
            plain_ms.append((time.perf_counter() - start) * 1000)

    async def one_fresh(http: httpx.AsyncClient, i: int, text: str) -> None:
        start = time.perf_counter()
        body = {"input": text, "instruction": fresh_instruction(i), "encoding_format": "base64"}
        try:
            status = (await http.post("/v1/embeddings", json=body)).status_code
        except httpx.TimeoutException:
            status = 0  # gave up waiting (counted apart)
        fresh_results.append((status, (time.perf_counter() - start) * 1000))

    async def fresh_client(http: httpx.AsyncClient, stop: asyncio.Event) -> int:
        sent: list[asyncio.Task] = []
        for i, text in enumerate(fresh):
            if stop.is_set():
                break
            sent.append(asyncio.create_task(one_fresh(http, first + i, text)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
        # the phase is over: requests still waiting for their centers are abandoned (not counted); the
        # server finishes the centring it accepted, which run() waits out before the next phase
        for task in sent:
            task.cancel()
        await asyncio.gather(*sent, return_exceptions=True)
        return len(sent)

    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        stop = asyncio.Event()
        background = asyncio.create_task(fresh_client(http, stop)) if fresh else None
        await asyncio.gather(*(plain_client(http, plain[c::clients]) for c in range(clients)))
        stop.set()
        sent = await background if background is not None else 0
    return {"plain_ms": plain_ms, "fresh": fresh_results, "fresh_sent": sent}


def percentiles(values: list[float]) -> dict:
    """p50, p99, mean and count of latencies in ms."""
    a = np.array(values, dtype=float)
    if not len(a):
        return {"requests": 0}
    return {
        "requests": len(a),
        "p50_ms": round(float(np.percentile(a, 50)), 1),
        "p99_ms": round(float(np.percentile(a, 99)), 1),
        "mean_ms": round(float(a.mean()), 1),
    }


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Per condition, the plain client's latency and, under the stream, what the instruction client got."""
    out = {}
    for condition, phases in runs.items():
        plain = [ms for p in phases for ms in p["plain_ms"]]
        fresh = [r for p in phases for r in p["fresh"]]
        out[condition] = {"plain": percentiles(plain)}
        if condition in ("stream", SATURATED):
            answered = [ms for status, ms in fresh if status == 200]
            refused = [ms for status, ms in fresh if status == 429]
            sent = sum(p["fresh_sent"] for p in phases)
            out[condition]["new_instructions"] = {
                "sent": sent,
                "answered": len(answered),
                "refused_429": len(refused),
                "refused_p99_ms": percentiles(refused).get("p99_ms"),
                "all_p99_ms": percentiles([ms for _, ms in fresh]).get("p99_ms"),
                "timed_out": sum(status == 0 for status, _ in fresh),
                "other": sum(status not in (0, 200, 429) for status, _ in fresh),
                "unanswered_at_phase_end": sent - len(fresh),
                **{k: v for k, v in percentiles(answered).items() if k != "requests"},
            }
    idle, stream = out["idle"]["plain"], out["stream"]["plain"]
    out["p99_ratio"] = round(stream["p99_ms"] / idle["p99_ms"], 2) if idle.get("p99_ms") else None
    out["p50_ratio"] = round(stream["p50_ms"] / idle["p50_ms"], 2) if idle.get("p50_ms") else None
    return out


def markdown(report: dict) -> str:
    """The report as a markdown table (what docs/serving.md quotes)."""
    s = report["summary"]
    c = report["config"]
    lines = [
        "# Plain-request latency with and without a stream of new instructions",
        "",
        f"Model {c['model']}, GIRCSE K={c['steps']}, {c['server_threads']} server thread(s), plain request = "
        f"{c['plain_texts']} sentences, one new instruction every {c['interval']} s; git {report['git_commit']}.",
        "",
        "| condition | plain requests | p50 (ms) | p99 (ms) | mean (ms) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for condition in ("idle", "stream"):
        p = s[condition]["plain"]
        lines.append(f"| {condition} | {p['requests']} | {p['p50_ms']} | {p['p99_ms']} | {p['mean_ms']} |")
    lines += ["", f"p99 stream / idle: **{s['p99_ratio']}** (target <= 2); p50: {s['p50_ratio']}.", ""]
    n = s["stream"]["new_instructions"]
    lines.append(
        f"New instructions: {n['sent']} sent, {n['answered']} answered (p50 {n.get('p50_ms')} ms, p99 "
        f"{n.get('p99_ms')} ms), {n['refused_429']} refused with 429 (centring budget or bound), "
        f"{n['unanswered_at_phase_end']} still waiting when the plain client was done, {n['timed_out']} timed out, "
        f"{n['other']} other."
    )
    if SATURATED in s:
        sat = s[SATURATED]
        n, p = sat["new_instructions"], sat["plain"]
        lines += [
            "",
            f"## New instructions while {c['saturating_clients']} plain clients saturate the server",
            "",
            f"Plain requests: {p['requests']} (p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms). New instructions (one "
            f"every {c['saturated_interval']} s, bound `max_centering_wait` {c['max_centering_wait']} s): "
            f"{n['sent']} sent, {n['answered']} answered (p99 {n.get('p99_ms')} ms), {n['refused_429']} refused "
            f"with 429 (p99 {n['refused_p99_ms']} ms), {n['timed_out']} timed out, {n['other']} other, "
            f"{n['unanswered_at_phase_end']} unanswered at the end; p99 of every answer: **{n['all_p99_ms']} ms**.",
        ]
    return "\n".join(lines) + "\n"


def _option(extra: list[str], name: str, default: float) -> float:
    """The value of a `genembed serve` option among ``--extra`` ones (``--name=value``), else ``default``."""
    for option in extra:
        if option.startswith(f"{name}="):
            return float(option.split("=", 1)[1])
    return default


def _drain(server: Server, timeout: float = 3600) -> float:
    """Wait until the server centres nothing and queues no centring; the seconds it took."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        health = server.health()
        if not health["centering_instructions"] and not health["queued_centering"]:
            return round(time.perf_counter() - start, 1)
        time.sleep(0.5)
    raise RuntimeError(f"the server was still centring after {timeout} s")


def run(args: argparse.Namespace) -> dict:
    """Start the server, run the phases, stop it; the report."""
    sentences = _sentences(STSB)
    per_phase = args.requests // 2
    with tempfile.TemporaryDirectory(prefix="serve_fairness-") as tmp:
        os.environ["GENEMBED_CENTER_CACHE"] = str(Path(tmp) / "centers")  # every new instruction is computed
        server = Server("fairness", list(args.extra), args, Path(tmp))
        runs: dict[str, list[dict]] = {"idle": [], "stream": [], SATURATED: []}
        try:
            server.wait_ready(timeout=600)
            asyncio.run(_phase(server.url, [sentences[: args.plain_texts]] * 3, [], args.interval))  # warm up
            offset, used = args.plain_texts, 0  # plain texts from the start, instruction texts from the end
            for condition in PHASES:
                plain = [sentences[offset + i * args.plain_texts :][: args.plain_texts] for i in range(per_phase)]
                offset += per_phase * args.plain_texts
                fresh = sentences[::-1][used:] if condition == "stream" else []
                result = asyncio.run(_phase(server.url, plain, fresh, args.interval, first=used))
                used += result["fresh_sent"]
                result["drain_s"] = _drain(server)  # the centring it accepted, before the next phase
                runs[condition].append(result)
                print(condition, json.dumps(percentiles(result["plain_ms"])), flush=True)
            n = args.saturating_clients * args.saturating_requests
            plain = [sentences[offset + i * args.plain_texts :][: args.plain_texts] for i in range(n)]
            fresh = sentences[::-1][used:]
            result = asyncio.run(
                _phase(server.url, plain, fresh, args.saturated_interval, first=used, clients=args.saturating_clients)
            )
            result["drain_s"] = _drain(server)
            runs[SATURATED].append(result)
            print(SATURATED, json.dumps(result["fresh"]), flush=True)
            health = server.health()
        finally:
            server.stop()
    return {
        "benchmark": "serve_fairness",
        "config": {
            "model": args.model or "default (SmolLM2-135M-Instruct + shipped adapter)",
            "extra_server_options": list(args.extra),
            "steps": args.steps,
            "server_threads": args.server_threads,
            "plain_texts": args.plain_texts,
            "plain_requests": per_phase * len(PHASES),
            "interval": args.interval,
            "phases": [*PHASES, SATURATED],
            "saturating_clients": args.saturating_clients,
            "saturating_requests": args.saturating_requests,
            "saturated_interval": args.saturated_interval,
            "max_centering_wait": _option(args.extra, "--max-centering-wait", ServeSettings.max_centering_wait),
            "texts": str(STSB.relative_to(REPO.parent)),
        },
        "git_commit": git_commit(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
        "summary": summarize(runs),
        "server_health_at_end": health,
        "raw": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model to serve (default: the bundled default)")
    parser.add_argument("--requests", type=int, default=120, help="plain requests per condition (split in halves)")
    parser.add_argument("--plain-texts", type=int, default=4, help="sentences per plain request")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between new instructions")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--saturating-clients", type=int, default=4, help="plain clients in the saturated phase")
    parser.add_argument("--saturating-requests", type=int, default=15, help="requests per saturating client")
    parser.add_argument(
        "--saturated-interval", type=float, default=4.0, help="seconds between new instructions, saturated phase"
    )
    parser.add_argument("--server-threads", type=int, default=1, help="torch threads of the server")
    parser.add_argument("--extra", action="append", default=[], help="another `genembed serve` option (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    if args.requests < 4:
        parser.error("--requests must be at least 4 (each condition runs twice)")
    report = run(args)
    print(json.dumps(report["summary"], indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("serve_fairness.json", json.dumps(report, indent=2) + "\n"),
        ("serve_fairness.md", markdown(report)),
    ):
        tmp = args.out / f".{name}.tmp-{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, args.out / name)


if __name__ == "__main__":
    main()
