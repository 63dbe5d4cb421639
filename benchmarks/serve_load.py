"""Load test of ``genembed serve``: requests/s and p50/p99 latency of ``POST /v1/embeddings`` at 1, 8
and 32 concurrent clients, micro-batched vs. unbatched (``--max-batch-requests 1``), side by side.

Two servers run the same model as subprocesses on loopback ports (the way users run it); each
concurrency level sends the same texts to both, in two halves ordered batched, unbatched, unbatched,
batched, so both see the same machine conditions. Each client sends one request after another (a closed loop), each
request one sentence from STS-B dev (distinct texts), GIRCSE K=5, base64 encoding (the OpenAI
client's default). Each server uses one torch thread (``--server-threads``): on a 2-core machine the
load generator needs the other core, and two torch threads competing with other processes make
every forward pass many times slower (OpenMP threads wait for each other). Writes
``serve_load.json`` (config, git commit, per-level numbers) and ``serve_load.png``.

Run (loads the default model twice; about 2 minutes on 2 CPU cores):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/serve_load.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _run_info import REPO, git_commit

STSB = REPO.parent / "shared" / "data" / "dev" / "stsb-dev" / "pairs.jsonl"
MODES = {"batched": [], "unbatched": ["--max-batch-requests", "1"]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sentences(path: Path) -> list[str]:
    seen: dict[str, None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        seen.setdefault(row["s1"], None)
        seen.setdefault(row["s2"], None)
    return list(seen)


class Server:
    """``genembed serve`` in a subprocess on a free loopback port."""

    def __init__(self, name: str, extra: list[str], args: argparse.Namespace, log_dir: Path):
        self.name, self.port = name, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-c", "from genembed.cli.app import main; main()", "serve"]
        command += [
            "--port",
            str(self.port),
            "--steps",
            str(args.steps),
            "--max-queue",
            "1024",
            "--log-level",
            "warning",
        ]
        command += ["--threads", str(args.server_threads)]
        command += (["--model", args.model] if args.model else []) + extra
        self.log = log_dir / f"server-{name}.log"
        self.command = command
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited:\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} server did not start in {timeout}s:\n{self.log.read_text()}")

    def health(self) -> dict:
        import httpx

        return httpx.get(self.url + "/health", timeout=10).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _load(url: str, texts: list[str], concurrency: int) -> tuple[list[float], float, int]:
    """Closed-loop clients; returns (latencies in s of successful requests, wall seconds, failures)."""
    import httpx

    latencies: list[float] = []
    failures = 0
    queue = iter(texts)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal failures
        for text in queue:  # clients share one iterator: each text is sent once
            t0 = time.perf_counter()
            response = await http.post("/v1/embeddings", json={"input": text, "encoding_format": "base64"})
            if response.status_code == 200:
                latencies.append(time.perf_counter() - t0)
            else:
                failures += 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return latencies, wall, failures


def run_half(server: Server, texts: list[str], concurrency: int) -> dict:
    """Load one server with ``texts``; raw latencies, wall time and batching counters."""
    before = server.health()
    latencies, wall, failures = asyncio.run(_load(server.url, texts, concurrency))
    after = server.health()
    return {
        "latencies": latencies,
        "wall": wall,
        "failures": failures,
        "batches": after["batches"] - before["batches"],
        "batched_requests": after["batched_requests"] - before["batched_requests"],
    }


def summarize(halves: list[dict], concurrency: int) -> dict:
    lat_ms = np.array([x for h in halves for x in h["latencies"]]) * 1000
    wall = sum(h["wall"] for h in halves)
    batches = sum(h["batches"] for h in halves)
    return {
        "concurrency": concurrency,
        "requests": len(lat_ms) + sum(h["failures"] for h in halves),
        "failures": sum(h["failures"] for h in halves),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(lat_ms) / wall, 2),
        "p50_ms": round(float(np.percentile(lat_ms, 50)), 1),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 1),
        "mean_ms": round(float(lat_ms.mean()), 1),
        "mean_batch_requests": round(sum(h["batched_requests"] for h in halves) / max(batches, 1), 2),
    }


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rps, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {"batched": "#2d5bd1", "unbatched": "#d6453d"}
    for mode, levels in results.items():
        c = [lv["concurrency"] for lv in levels]
        ax_rps.plot(c, [lv["requests_per_s"] for lv in levels], "o-", color=colours[mode], label=mode)
        ax_lat.plot(c, [lv["p50_ms"] for lv in levels], "o-", color=colours[mode], label=f"{mode} p50")
        ax_lat.plot(c, [lv["p99_ms"] for lv in levels], "s--", color=colours[mode], alpha=0.7, label=f"{mode} p99")
    for ax in (ax_rps, ax_lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks([lv["concurrency"] for lv in next(iter(results.values()))])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent clients")
        ax.grid(alpha=0.3)
        ax.legend()
    ax_rps.set_ylabel("requests / s")
    ax_rps.set_title("throughput (higher is better)")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_yscale("log")
    ax_lat.set_title("latency (lower is better)")
    fig.suptitle("genembed serve: POST /v1/embeddings, one sentence per request, GIRCSE K=5")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model to serve (default: the bundled default)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=64, help="requests per level at least")
    parser.add_argument("--per-client", type=int, default=6, help="requests per client (levels send the larger)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--server-threads", type=int, default=1, help="torch threads per server (the load generator needs a core too)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()

    sentences = _sentences(STSB)
    args.out.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="serve_load-"))
    servers = {name: Server(name, extra, args, log_dir) for name, extra in MODES.items()}
    results: dict[str, list[dict]] = {name: [] for name in MODES}
    offset = 0
    try:
        for server in servers.values():
            server.wait_ready()
            asyncio.run(_load(server.url, sentences[-8:], 2))  # warm up
        for concurrency in args.concurrency:
            n = max(args.requests, args.per_client * concurrency)
            texts = sentences[offset : offset + n]
            offset += n
            # A B B A: each server gets both halves of the texts, in an order that cancels slow drift in
            # machine load (other processes on a shared machine) between the two measurements
            halves = [texts[: n // 2], texts[n // 2 :]]
            runs: dict[str, list[dict]] = {name: [] for name in servers}
            for half, order in zip(halves, (list(servers), list(servers)[::-1]), strict=True):
                for name in order:
                    runs[name].append(run_half(servers[name], half, concurrency))
            for name in servers:
                level = summarize(runs[name], concurrency)
                results[name].append(level)
                print(f"{name:>9} c={concurrency:<3} {json.dumps(level)}", flush=True)
    finally:
        for server in servers.values():
            server.stop()

    ratios = {
        str(b["concurrency"]): round(b["requests_per_s"] / u["requests_per_s"], 2)
        for b, u in zip(results["batched"], results["unbatched"], strict=True)
    }
    report = {
        "benchmark": "serve_load",
        "config": {
            "model": args.model or "default (SmolLM2-135M-Instruct)",
            "steps": args.steps,
            "method": "gircse",
            "texts": str(STSB.relative_to(REPO.parent)),
            "requests_per_level": {str(c): max(args.requests, args.per_client * c) for c in args.concurrency},
            "server_commands": {name: s.command[3:] for name, s in servers.items()},
            "cpu_count": os.cpu_count(),
            "server_torch_threads": args.server_threads,
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "git_commit": git_commit(),
        "results": results,
        "batched_over_unbatched_throughput": ratios,
    }
    json_path = args.out / "serve_load.json"
    tmp = json_path.with_name(f".{json_path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, json_path)
    plot(results, args.out / "serve_load.png")
    print(f"throughput ratio batched/unbatched by concurrency: {ratios}")
    print(f"wrote {json_path} and {args.out / 'serve_load.png'}")


if __name__ == "__main__":
    main()
