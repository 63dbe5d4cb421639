"""How long the first embedding request of a fresh ``genembed serve`` takes, against the second.

With centering (on for the shipped adapter), an instruction's first use needs its center
(:mod:`genembed.encoders.centering`). Starts the default model in a fresh server subprocess (one
torch thread, an empty center disk cache), then times, one after another, with different texts:
two requests with a named instruction (``input_type=classification``), then two with an instruction
the server has never seen (``instruction=...``). Also times start-up (launch to ``/health``).
Writes ``serve_first_request.json`` (config, git commit, seconds).

Run (about a minute on 2 CPU cores):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/serve_first_request.py --out benchmarks/results

Run it with ``PYTHONPATH`` pointing at another checkout's ``src`` to time that code's server.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from _run_info import git_commit
from serve_load import Server

TEXTS = [
    "The battery died after two hours and support never answered.",
    "A quiet hotel with friendly staff and a view of the harbour.",
    "The central bank raised interest rates by a quarter point.",
    "Two children are building a sandcastle on the beach.",
]
AD_HOC = "Decide whether the customer in the given text is satisfied."


def _timed(url: str, body: dict) -> float:
    import httpx

    start = time.perf_counter()
    response = httpx.post(url + "/v1/embeddings", json=body, timeout=600)
    response.raise_for_status()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for serve_first_request.json")
    parser.add_argument("--model", default=None, help="model to serve (default: the bundled one)")
    parser.add_argument("--server-threads", type=int, default=1)
    args = parser.parse_args()
    args.steps = 5
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GENEMBED_CENTER_CACHE"] = str(Path(tmp) / "centers")  # the server starts with none cached
        launched = time.perf_counter()
        server = Server("fresh", [], args, Path(tmp))
        try:
            server.wait_ready(timeout=600)
            startup = time.perf_counter() - launched
            seconds = {
                "named_first": _timed(server.url, {"input": TEXTS[0], "input_type": "classification"}),
                "named_second": _timed(server.url, {"input": TEXTS[1], "input_type": "classification"}),
                "ad_hoc_first": _timed(server.url, {"input": TEXTS[2], "instruction": AD_HOC}),
                "ad_hoc_second": _timed(server.url, {"input": TEXTS[3], "instruction": AD_HOC}),
            }
        finally:
            server.stop()
    result = {
        "config": {"model": args.model or "default", "server_threads": args.server_threads, "steps": args.steps},
        "git_commit": git_commit(),
        "machine": platform.machine(),
        "startup_seconds": startup,
        "seconds": seconds,
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "serve_first_request.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
