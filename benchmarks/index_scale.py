"""Index scale: build time, memory, query latency (p50/p99) and recall@10 against exact search for faiss
Flat (exact), faiss HNSW, faiss IVF-PQ and Milvus (embedded milvus-lite), side by side in one run.

Data: synthetic unit vectors of the default model's width (576), a seeded mixture of Gaussian clusters
(embeddings are clustered, not uniform), generated chunk by chunk from ``default_rng([seed, 2, chunk])``
so no more than one chunk (50,000 x 576 float32 = 115 MB) is ever materialised outside the index under
test. Queries come from the same mixture with another seed. Exact top-10 neighbours are computed by
streaming the chunks once per size (numpy, cached in ``--work``).

Each (backend, size) row runs in its own subprocess (so memory is that backend's alone and a killed
row loses only itself); finished rows are kept in the results JSON and skipped when the command is
rerun. Build time counts the library calls (training, adding / upserting, flushing), not the data
generation. Memory: the process's resident set after the build minus before it ("index RSS") and its
peak. Latency: one query per call, after 10 warm-up queries; Milvus goes through genembed's
``MilvusStore.search``, which also returns each hit's metadata. Recall@10: overlap with the exact top 10.

Run (one thread for faiss and numpy; the machine is shared; about 1 h for both sizes):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/index_scale.py --sizes 100000,1000000 \\
        --out benchmarks/results/index_scale.json

Quick check: ``--sizes 10000 --out /tmp/index_scale.json``. ``--plot-only`` redraws the PNG and the
Markdown table from the JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _run_info import REPO, git_commit

BACKENDS = {
    "flat": {"label": "faiss Flat (exact)", "kind": "faiss", "factory": "Flat", "search": {}},
    "hnsw": {
        "label": "faiss HNSW32, efSearch 64",
        "kind": "faiss",
        "factory": "HNSW32",
        "search": {"efSearch": 64},
        "sweep": {"efSearch": [16, 32, 64, 128, 256, 512]},
    },
    "ivfpq": {
        "label": "faiss IVF1024,PQ32, nprobe 32",
        "kind": "faiss",
        "factory": "IVF1024,PQ32",
        "search": {"nprobe": 32},
        "sweep": {"nprobe": [8, 16, 32, 64, 128, 256]},
    },
    "milvus": {"label": "milvus-lite AUTOINDEX", "kind": "milvus", "index_type": "AUTOINDEX", "search": {}},
    "milvus_flat": {"label": "milvus-lite FLAT", "kind": "milvus", "index_type": "FLAT", "search": {}},
}
K = 10


# ---- data ----------------------------------------------------------------------------------------
def _normalize(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def centers(args: argparse.Namespace) -> np.ndarray:
    rng = np.random.default_rng([args.seed, 1])
    return _normalize(rng.standard_normal((args.clusters, args.dim), dtype=np.float32))


def sample(args: argparse.Namespace, stream: list[int], rows: int, middle: np.ndarray) -> np.ndarray:
    """``rows`` unit vectors: a random cluster centre plus isotropic noise of norm ``args.noise``."""
    rng = np.random.default_rng([args.seed, *stream])
    noise = rng.standard_normal((rows, args.dim), dtype=np.float32) * np.float32(args.noise / np.sqrt(args.dim))
    noise += middle[rng.integers(len(middle), size=rows)]
    return _normalize(noise)


class LazyChunk:
    """Chunk ``c`` of the corpus, generated when indexed (the last one is kept); counts generation time."""

    clock = 0.0  # wall seconds spent generating
    cpu = 0.0  # CPU seconds spent generating
    _cache: tuple[int, np.ndarray] | None = None

    def __init__(self, args: argparse.Namespace, middle: np.ndarray, c: int, rows: int):
        self.args, self.middle, self.c, self.rows = args, middle, c, rows

    def __len__(self) -> int:
        return self.rows

    def array(self) -> np.ndarray:
        if LazyChunk._cache is None or LazyChunk._cache[0] != self.c:
            LazyChunk._cache = None
            t0, c0 = time.perf_counter(), time.process_time()
            LazyChunk._cache = (self.c, sample(self.args, [2, self.c], self.rows, self.middle))
            LazyChunk.clock += time.perf_counter() - t0
            LazyChunk.cpu += time.process_time() - c0
        return LazyChunk._cache[1]

    def __getitem__(self, index):  # noqa: ANN001 - numpy indexing
        return self.array()[index]


def chunks(args: argparse.Namespace, middle: np.ndarray, size: int) -> list[LazyChunk]:
    return [
        LazyChunk(args, middle, c, min(args.chunk, size - start)) for c, start in enumerate(range(0, size, args.chunk))
    ]


def queries(args: argparse.Namespace, middle: np.ndarray) -> np.ndarray:
    return sample(args, [3], args.queries, middle)


def ground_truth(args: argparse.Namespace, size: int) -> str:
    """The file (in ``--work``) of the exact top-K ids of every query over ``size`` vectors, streamed."""
    key = f"gt-{size}-d{args.dim}-c{args.clusters}-n{args.noise}-s{args.seed}-q{args.queries}-ch{args.chunk}.npy"
    path = args.work / key
    if path.is_file():
        return key
    middle = centers(args)
    q = queries(args, middle)
    best_s = np.full((len(q), K), -np.inf, dtype=np.float32)
    best_i = np.full((len(q), K), -1, dtype=np.int64)
    for c, part in enumerate(chunks(args, middle, size)):
        scores = q @ part.array().T  # (Q, chunk)
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        both_s = np.concatenate([best_s, np.take_along_axis(scores, top, axis=1)], axis=1)
        both_i = np.concatenate([best_i, top + c * args.chunk], axis=1)
        order = np.argsort(-both_s, axis=1, kind="stable")[:, :K]
        best_s, best_i = np.take_along_axis(both_s, order, axis=1), np.take_along_axis(both_i, order, axis=1)
    np.save(path, best_i)
    return key


# ---- one row, in a subprocess ----------------------------------------------------------------------
def _rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _recall(found: np.ndarray, gt: np.ndarray) -> float:
    return float(np.mean([len(set(f[:K].tolist()) & set(g.tolist())) / K for f, g in zip(found, gt, strict=True)]))


def _latency(search, q: np.ndarray, n: int) -> dict:  # noqa: ANN001
    for i in range(10):
        search(q[i : i + 1])
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        search(q[i % len(q) : i % len(q) + 1])
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "n": n}


def run_row(args: argparse.Namespace, name: str, size: int) -> dict:
    import faiss

    from genembed.retrieval.faiss_factory import add_blocks, apply_search_params, new_faiss_index, train_on_sample

    faiss.omp_set_num_threads(args.threads)
    spec = BACKENDS[name]
    middle = centers(args)
    q = queries(args, middle)
    gt = np.load(args.work / args.gt_file)
    parts = chunks(args, middle, size)
    if spec["kind"] == "milvus":  # import the client libraries outside the measured memory
        import milvus_lite.adapter.grpc.server  # noqa: F401
        import pymilvus  # noqa: F401
    gc.collect()
    before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    if spec["kind"] == "faiss":
        index = new_faiss_index(args.dim, spec["factory"])
        train_on_sample(index, parts)
        add_blocks(index, parts)
        apply_search_params(index, spec["search"])
        build = time.perf_counter() - t0 - LazyChunk.clock

        def search(x: np.ndarray) -> np.ndarray:
            return index.search(x, K)[1]

        extra = {"factory": spec["factory"], "search_params": spec["search"], "ntotal": int(index.ntotal)}
    else:
        build, search, extra = _milvus_row(args, spec, size, parts, t0)
    build_cpu = time.process_time() - c0 - LazyChunk.cpu
    LazyChunk._cache = None
    gc.collect()
    after = _rss_mb()
    first = time.perf_counter()
    found = np.concatenate([search(q[i : i + 100]) for i in range(0, len(q), 100)])
    batch_s = time.perf_counter() - first
    if spec["kind"] == "milvus":  # Milvus ids are the chunk keys of "v<row>#0"
        from genembed.retrieval.milvus_store import chunk_key

        gt = np.vectorize(lambda i: chunk_key(f"v{i}#0"))(gt)
    recall = _recall(found, gt)
    sweep = {}
    for name_, values in spec.get("sweep", {}).items():  # the search parameter's recall / latency trade-off
        sweep[name_] = []
        for value in values:
            apply_search_params(index, {name_: value})
            point = {"value": value, "recall@10": _recall(search(q), gt)}
            sweep[name_].append(point | _latency(search, q, min(100, args.latency_queries)))
        apply_search_params(index, spec["search"])
    return {
        "backend": name,
        "size": size,
        "build_s": build,
        "build_cpu_s": build_cpu,
        "generation_s (not in build_s)": LazyChunk.clock,
        "index_rss_mb": after - before,
        "peak_rss_mb": _rss_mb("VmHWM"),
        "recall@10": recall,
        "batch_search_s": batch_s,
        "latency": _latency(search, q, args.latency_queries),
        **({"sweep": sweep} if sweep else {}),
        **extra,
    }


def _milvus_row(args: argparse.Namespace, spec: dict, size: int, parts: list[LazyChunk], t0: float):  # noqa: ANN202
    from genembed.encoders.settings import IndexEmbedSettings
    from genembed.retrieval.milvus_store import MilvusStore
    from genembed.retrieval.store import ChunkRecord
    from genembed.retrieval.stores import index_settings, parse_location

    path = args.work / f"milvus-{size}.db"
    shutil.rmtree(path, ignore_errors=True)
    location = parse_location(f"milvus:{path}")
    manifest = {
        "model": {"name": "synthetic", "dim": args.dim, "ref": {}},
        "embed": IndexEmbedSettings().to_dict(),
        "chunking": None,
        "kv": None,
        **index_settings(location, args.dim, index_type=spec["index_type"], search_params=spec["search"]),
    }
    index = MilvusStore.create(location, manifest, overwrite=True)
    for c, part in enumerate(parts):
        first = c * args.chunk
        records = [
            ChunkRecord(-1, f"v{first + n}#0", f"v{first + n}", 0, "", "", "synthetic", 0) for n in range(len(part))
        ]
        vectors = part.array()
        for start in range(0, len(part), 10_000):
            index.upsert(records[start : start + 10_000], vectors[start : start + 10_000])
            done = first + min(start + 10_000, len(part))
            print(f"  upserted {done} of {size} after {time.perf_counter() - t0:.0f} s", flush=True)
    index.client.flush(index.name)
    while True:  # the build ends when every row is indexed (milvus-lite indexes sealed segments)
        info = index.client.describe_index(index.name, "vector")
        if info.get("pending_index_rows", 0) == 0 and info.get("indexed_rows", size) >= size:
            break
        time.sleep(0.5)
    index.search(np.ones((1, args.dim), dtype=np.float32) / np.sqrt(args.dim), K)
    build = time.perf_counter() - t0 - LazyChunk.clock

    def search(x: np.ndarray) -> np.ndarray:
        return index.search(x, K)[1]

    disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return build, search, {"index_type": spec["index_type"], "disk_mb": disk / 2**20}


# ---- the run -------------------------------------------------------------------------------------
def run_capped(cmd: list[str], row_out: Path, max_rss_gb: float) -> dict:
    """Run one row's subprocess, echoing its output; stop it if its resident set passes ``max_rss_gb``."""
    import threading

    import psutil

    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last: dict[str, str] = {}

    def echo() -> None:
        for line in child.stdout:  # type: ignore[union-attr]
            if line.startswith("  upserted"):
                last["progress"] = line.strip()
            if not line.startswith(("I1", "E1", "W1")):  # grpc's keepalive chatter
                print(line, end="", flush=True)

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    peak = 0.0
    while child.poll() is None:
        try:
            rss = psutil.Process(child.pid).memory_info().rss / 2**30
        except psutil.NoSuchProcess:
            break
        peak = max(peak, rss)
        if rss > max_rss_gb:
            child.kill()
            child.wait()
            reader.join(timeout=5)
            return {
                "stopped": f"stopped when its resident set passed {max_rss_gb:g} GB ({last.get('progress', '')})",
                "rss_gb_at_stop": rss,
                "progress": last.get("progress", ""),
            }
        time.sleep(0.5)
    reader.join(timeout=5)
    if child.returncode != 0:
        raise RuntimeError(f"{cmd[3]} failed with exit code {child.returncode}")
    return json.loads(row_out.read_text()) | {"peak_rss_gb_polled": peak}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, of: " + ", ".join(BACKENDS))
    parser.add_argument("--dim", type=int, default=576, help="vector width (SmolLM2-135M: 576)")
    parser.add_argument("--clusters", type=int, default=1000, help="Gaussian clusters in the mixture")
    parser.add_argument("--noise", type=float, default=1.0, help="noise norm around a unit centre (cos ~ 0.71)")
    parser.add_argument("--queries", type=int, default=1000, help="queries for recall@10")
    parser.add_argument("--latency-queries", type=int, default=200, help="one-at-a-time queries timed")
    parser.add_argument("--chunk", type=int, default=50_000, help="vectors generated at a time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="faiss OpenMP threads")
    parser.add_argument("--max-rss-gb", type=float, default=3.5, help="stop a row whose process grows past this")
    parser.add_argument("--work", type=Path, default=Path("/tmp/genembed-index-scale"), help="scratch folder")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "index_scale.json")
    parser.add_argument("--plot-only", action="store_true", help="redraw PNG and Markdown from --out")
    parser.add_argument("--row", help=argparse.SUPPRESS)  # internal: "backend@size" in a subprocess
    parser.add_argument("--gt-file", help=argparse.SUPPRESS)
    parser.add_argument("--row-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.row:
        name, size = args.row.rsplit("@", 1)
        _write_json(args.row_out, run_row(args, name, int(size)))
        return
    if args.plot_only:
        report(args.out)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = [b.strip() for b in args.backends.split(",")]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; choose from {list(BACKENDS)}")
    config = {
        k: getattr(args, k)
        for k in ("dim", "clusters", "noise", "queries", "latency_queries", "chunk", "seed", "threads")
    }
    config |= {"k": K, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if results.get("config", config) != config:
        sys.exit(f"{args.out} holds results made with other settings; use another --out")
    results.update(config=config, git_commit=git_commit(), command=" ".join([Path(sys.executable).name, *sys.argv]))
    results["backends"] = {**results.get("backends", {}), **{b: BACKENDS[b] for b in backends}}
    results.setdefault("rows", {})
    results["machine"] = {"cpus": os.cpu_count(), "note": "shared with a training job; one thread per backend"}
    results["max_rss_gb"] = args.max_rss_gb
    for size in sizes:
        t0 = time.perf_counter()
        gt_file = ground_truth(args, size)
        print(f"exact top-{K} for {size:,} vectors: {time.perf_counter() - t0:.0f} s", flush=True)
        for name in backends:
            key = f"{name}@{size}"
            if key in results["rows"]:
                print(f"{key}: done already", flush=True)
                continue
            print(f"{key}: running", flush=True)
            row_out = args.work / f"row-{name}-{size}.json"
            cmd = [sys.executable, __file__, "--row", key, "--gt-file", gt_file, "--row-out", str(row_out)]
            cmd += [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in config if k not in ("k", "OMP_NUM_THREADS")]
            cmd += ["--work", str(args.work)]
            row = run_capped(cmd, row_out, args.max_rss_gb) | {"backend": name, "size": size}
            results["rows"][key] = row
            _write_json(args.out, results)
            if "stopped" in row:
                print(f"{key}: {row['stopped']}", flush=True)
                continue
            lat = row["latency"]
            print(
                f"{key}: build {row['build_s']:.1f} s, index RSS {row['index_rss_mb']:.0f} MB, "
                f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, recall@10 {row['recall@10']:.3f}",
                flush=True,
            )
    report(args.out)


def report(path: Path) -> None:
    """Write ``<out>.md`` (the table) and ``<out>.png`` (build time, memory, latency, recall)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(path.read_text())
    rows = sorted(results["rows"].values(), key=lambda r: (r["size"], list(BACKENDS).index(r["backend"])))
    lines = [
        "| vectors | backend | build wall (s) | build CPU (s) | index RSS (MB) | peak RSS (MB) | p50 (ms) | p99 (ms) "
        "| recall@10 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "stopped" in r:
            lines.append(f"| {r['size']:,} | {BACKENDS[r['backend']]['label']} | {r['stopped']} |||||||")
            continue
        lat = r["latency"]
        lines.append(
            f"| {r['size']:,} | {BACKENDS[r['backend']]['label']} | {r['build_s']:,.1f} | {r['build_cpu_s']:,.1f} "
            f"| {r['index_rss_mb']:,.0f} "
            f"| {r['peak_rss_mb']:,.0f} | {lat['p50_ms']:.2f} | {lat['p99_ms']:.2f} | {r['recall@10']:.3f} |"
        )
    sweeps = [(r, param, p) for r in rows for param, points in r.get("sweep", {}).items() for p in points]
    if sweeps:
        lines += ["", "| vectors | backend | search parameter | recall@10 | p50 (ms) | p99 (ms) |"]
        lines.append("|---:|---|---|---:|---:|---:|")
        for r, param, p in sweeps:
            lines.append(
                f"| {r['size']:,} | faiss {r['factory']} | {param} {p['value']} | {p['recall@10']:.3f} "
                f"| {p['p50_ms']:.2f} | {p['p99_ms']:.2f} |"
            )
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    sizes = sorted({r["size"] for r in rows})
    names = [b for b in BACKENDS if any(r["backend"] == b for r in rows)]
    panels = [("build_s", "build time (s)"), ("index_rss_mb", "index memory, RSS (MB)"), ("p50_ms", "query p50 (ms)")]
    panels.append(("recall@10", "recall@10 vs exact"))
    fig, axes = plt.subplots(1, 5, figsize=(23, 4.2))
    width = 0.8 / max(len(names), 1)
    for ax, (field, title) in zip(axes[:4], panels, strict=True):
        for j, name in enumerate(names):
            values = []
            for size in sizes:
                r = next((r for r in rows if r["backend"] == name and r["size"] == size and "stopped" not in r), None)
                value = None if r is None else (r["latency"][field] if field.endswith("_ms") else r[field])
                values.append(np.nan if value is None else value)
            ax.bar(np.arange(len(sizes)) + j * width, values, width, label=BACKENDS[name]["label"])
        ax.set_xticks(np.arange(len(sizes)) + width * (len(names) - 1) / 2, [f"{s:,}" for s in sizes])
        ax.set_title(title)
        if field != "recall@10":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    for r in rows:  # recall against latency as efSearch / nprobe grow
        for param, points in r.get("sweep", {}).items():
            label = f"{r['backend']} {r['size']:,}: {param} {points[0]['value']}..{points[-1]['value']}"
            axes[4].plot([p["p50_ms"] for p in points], [p["recall@10"] for p in points], marker="o", label=label)
    axes[4].set_xscale("log")
    axes[4].set_xlabel("query p50 (ms)")
    axes[4].set_title("recall@10 vs latency, sweeping the search parameter")
    axes[4].legend(fontsize=7)
    threads = results["config"]["threads"]
    fig.suptitle(f"index scale: {results['config']['dim']}-d unit vectors, k={K}, {threads} thread(s)")
    stopped = [f"{BACKENDS[r['backend']]['label']} at {r['size']:,}: {r['stopped']}" for r in rows if "stopped" in r]
    fig.tight_layout(rect=(0, 0.06 * bool(stopped), 1, 1))
    if stopped:
        fig.text(0.01, 0.01, "not measured: " + "; ".join(stopped), fontsize=8)
    fig.savefig(path.with_suffix(".png"), dpi=110)
    print(f"wrote {path}, {path.with_suffix('.md')} and {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
