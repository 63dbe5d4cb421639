"""nDCG@10 on a retrieval task (default scifact-dev) through each index store: the same `genembed encode`
embeddings imported (`genembed index import`) into a faiss folder (exact Flat and HNSW32) and a Milvus
store (embedded milvus-lite), each queried as `genembed ask` and `model.search` query it
(``index.encode_queries`` with the settings recorded at import, then ``index.search``). The metric is
`genembed eval`'s (``genembed.eval.metrics.ndcg_at_k``, x100), so the faiss Flat row reproduces
`genembed eval`'s number for the same settings (README: raw mean pooling, max length 256: 22.90).

Run (1,611 documents embedded once into ``--work``, resumable; ~10 min on one thread):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/store_scifact.py --adapter none --method mean \\
        --max-length 256 --threads 1 --out benchmarks/results/store_scifact.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from _run_info import REPO, git_commit

DEFAULT_TASK = REPO.parent / "shared" / "data" / "dev" / "scifact-dev"
STORES = {
    "faiss Flat (exact)": {"where": "faiss-flat", "index_type": "Flat"},
    "faiss HNSW32": {"where": "faiss-hnsw", "index_type": "HNSW32", "search_params": {"efSearch": 64}},
    "milvus-lite AUTOINDEX": {"where": "milvus:{work}/scifact.db", "index_type": None},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, default=DEFAULT_TASK, help="retrieval task folder")
    parser.add_argument("--model", default=None, help="model (default: bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--adapter", default="none", help="LoRA adapter folder; 'none' for the raw backbone")
    parser.add_argument("--method", default="mean", help="embedding method: gircse, mean, last or grit")
    parser.add_argument("--steps", type=int, default=5, help="GIRCSE soft tokens K")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per text")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--work", type=Path, default=Path("/tmp/genembed-store-scifact"), help="embeddings, indexes")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "store_scifact.json")
    args = parser.parse_args()

    import torch

    import genembed
    from genembed.encoders import EmbedSettings
    from genembed.encoders.corpus import encode_corpus
    from genembed.eval.metrics import ndcg_at_k
    from genembed.eval.tasks import load_task
    from genembed.retrieval.encoded_import import import_encoded

    torch.set_num_threads(args.threads)
    task = load_task(args.task)
    data = task.data
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / "corpus.jsonl"
    lines = "".join(json.dumps({"id": d, "text": t}) + "\n" for d, t in zip(data.doc_ids, data.doc_texts, strict=True))
    if not corpus.is_file() or corpus.read_text() != lines:
        corpus.write_text(lines)
    model = genembed.load(args.model, adapter=False if args.adapter == "none" else args.adapter, dtype=args.dtype)
    options = EmbedSettings.build(method=args.method, steps=args.steps, max_length=args.max_length, tau=model.tau)
    t0 = time.perf_counter()
    encode_corpus(
        model.backbone,
        corpus,
        args.work / f"emb-{args.method}-{args.max_length}",
        options,
        instruction=task.doc_instruction,
        center=model.center,
        shard_size=256,
        title_field=None,
        model_name=model.name,
    )
    encode_s = time.perf_counter() - t0
    results: dict = {}
    query_embeddings = None
    for name, spec in STORES.items():
        where = spec["where"].format(work=args.work)
        where = where if where.startswith("milvus:") else str(args.work / where)
        t0 = time.perf_counter()
        index = import_encoded(
            args.work / f"emb-{args.method}-{args.max_length}",
            corpus,
            where,
            query_instruction=task.instruction,
            index_type=spec["index_type"],
            search_params=spec.get("search_params"),
            overwrite=True,
            show_progress_bar=False,
        )
        import_s = time.perf_counter() - t0
        queries = index.encode_queries(model, data.query_texts, batch_size=args.batch_size)
        if query_embeddings is None:
            query_embeddings = queries
        same_queries = bool(np.array_equal(queries, query_embeddings))
        t0 = time.perf_counter()
        _, ids = index.search(queries, 10)
        search_s = time.perf_counter() - t0
        ranked = [[index.chunk(int(i)).doc_id for i in row if i >= 0] for row in ids]
        per_query = [ndcg_at_k(r, data.qrels[q], 10) for r, q in zip(ranked, data.query_ids, strict=True)]
        results[name] = {
            "ndcg@10": float(np.mean(per_query)),  # ndcg_at_k is x100 already
            "where": where,
            "chunks": len(index),
            "import_s": import_s,
            "search_s (all queries, one call)": search_s,
            "query_embeddings_equal_to_first_store": same_queries,
            "top10": {q: r for q, r in zip(data.query_ids, ranked, strict=True)},
        }
        print(f"{name}: nDCG@10 {results[name]['ndcg@10']:.2f} ({len(index)} chunks)", flush=True)
    base = results["faiss Flat (exact)"]
    summary = {name: r["ndcg@10"] for name, r in results.items()}
    milvus = results["milvus-lite AUTOINDEX"]
    out = {
        "config": {
            "task": task.name,
            "model": model.name,
            "method": args.method,
            "steps": args.steps if args.method == "gircse" else None,
            "max_length": args.max_length,
            "dtype": args.dtype,
            "query_instruction": task.instruction,
            "doc_instruction": task.doc_instruction,
            "threads": args.threads,
            "queries": len(data.query_ids),
            "documents": len(data.doc_ids),
        },
        "ndcg@10": summary,
        "milvus_minus_faiss_flat": milvus["ndcg@10"] - base["ndcg@10"],
        "queries_with_identical_top10 (milvus vs faiss Flat)": sum(
            milvus["top10"][q] == base["top10"][q] for q in data.query_ids
        ),
        "encode_s (0 when cached)": encode_s,
        "stores": {name: {k: v for k, v in r.items() if k != "top10"} for name, r in results.items()},
        "git_commit": git_commit(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(json.dumps({"ndcg@10": summary, "milvus_minus_faiss_flat": out["milvus_minus_faiss_flat"]}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
