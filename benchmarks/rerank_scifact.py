"""nDCG@10 of embedding search alone vs. embedding search + generative reranking of the top N (GRIT's
one-model retrieve-then-rerank), on a retrieval task folder (default: scifact-dev).

Both rankings come from the same ``model.search(...)`` call per query: hits carry their embedding
rank and their rerank score. Document embeddings are cached as ``.npy`` in the output folder (atomic
writes), and per-query results are appended to a JSON-lines progress file, so an interrupted run
resumes where it stopped.

Run (2 shared CPU cores: ~15 min to embed the 1,611 scifact documents once, then 7-9 s per query to
rerank its top 10; ``--scoring`` is ``yes_no`` or ``query_likelihood``):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/rerank_scifact.py --adapter none --method mean \\
        --scoring query_likelihood --out benchmarks/results/rerank_scifact

With a GRIT jointly trained adapter (first stage and reranking both with it):

    .venv/bin/python benchmarks/rerank_scifact.py --adapter runs/grit-smollm2 --method grit \\
        --scoring query_likelihood --out benchmarks/results/rerank_scifact

Quick check on a subset (the task loader's ``limit``: the first N queries, their judged documents
and N others):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/rerank_scifact.py --limit 10 --out /tmp/rr
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from _run_info import REPO, git_commit

DEFAULT_TASK = REPO.parent / "shared" / "data" / "dev" / "scifact-dev"


def _atomic_save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        np.save(handle, array)
    os.replace(tmp, path)


def doc_embeddings(model, texts: list[str], encode_kwargs: dict, out: Path, batch_size: int) -> np.ndarray:
    """Embed documents once; cached by model, settings and the exact texts."""
    weights = [model.name, str(model.backbone.model.dtype)]
    key = hashlib.sha256(json.dumps([weights, encode_kwargs, texts], sort_keys=True).encode()).hexdigest()[:16]
    path = out / f"doc_embeddings-{key}.npy"
    if path.is_file():
        return np.load(path, allow_pickle=False)
    embeddings = model.encode_document(texts, batch_size=batch_size, show_progress_bar=True, **encode_kwargs)
    _atomic_save_npy(path, np.asarray(embeddings, dtype=np.float32))
    return embeddings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, default=DEFAULT_TASK, help="retrieval task folder")
    parser.add_argument("--model", default=None, help="model (default: bundled SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--adapter", default=None, help="LoRA adapter folder; 'none' for the raw backbone (default: genembed.load's)"
    )
    parser.add_argument(
        "--generator",
        default=None,
        help="weights to rerank with: 'base', 'adapter' (the embedding adapter) or a generation adapter's folder "
        "or name (default: genembed.load's, the adapter only if it was trained jointly)",
    )
    parser.add_argument("--method", default="mean", help="embedding method: gircse, mean, last or grit")
    parser.add_argument("--steps", type=int, default=5, help="GIRCSE soft tokens K")
    parser.add_argument("--rerank-top", type=int, default=10, help="candidates reranked per query")
    parser.add_argument("--scoring", default="yes_no", help="rerank scoring: yes_no or query_likelihood")
    parser.add_argument("--max-length", type=int, default=512, help="tokens per document (embedding and rerank)")
    parser.add_argument("--dtype", default="float32", help="weights dtype (the measured rows used float32)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--limit", type=int, default=None, help="quick run on a subset (see the docstring)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "rerank_scifact")
    args = parser.parse_args()

    import torch

    import genembed
    from genembed.eval.metrics import ndcg_at_k
    from genembed.eval.tasks import load_task
    from genembed.generation.adapters import generator_choice
    from genembed.retrieval.search import ExactIndex

    torch.set_num_threads(args.threads)
    task = load_task(args.task, limit=args.limit)
    data = task.data
    args.out.mkdir(parents=True, exist_ok=True)
    adapter = False if args.adapter == "none" else args.adapter
    generator = generator_choice(args.generator)
    model = genembed.load(args.model, adapter=adapter, dtype=args.dtype, generation_adapter=generator)
    encode_kwargs = {"method": args.method, "max_length": args.max_length}
    if args.method == "gircse":
        encode_kwargs["steps"] = args.steps
    config = {
        "task": task.name,
        "limit": args.limit,
        "model": model.name,
        "generation_adapter": model.generation_adapter,
        **({"generator": model.generation_adapter_name} if isinstance(generator, str) else {}),
        "dtype": args.dtype,
        "encode": encode_kwargs,
        "rerank_top": args.rerank_top,
        "rerank_scoring": args.scoring,
        "rerank_instruction": task.instruction,
        "queries": len(data.query_ids),
        "documents": len(data.doc_ids),
    }
    run_key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]

    t0 = time.perf_counter()
    index = ExactIndex(doc_embeddings(model, data.doc_texts, encode_kwargs, args.out, args.batch_size), data.doc_texts)
    embed_seconds = time.perf_counter() - t0

    progress = args.out / f"progress-{run_key}.jsonl"
    done: dict[str, dict] = {}
    if progress.is_file():
        for line in progress.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut off by a crash: that query is redone
                continue
            done[row["qid"]] = row
    from tqdm import tqdm

    t0 = time.perf_counter()
    with open(progress, "a", encoding="utf-8") as log:
        for qid, query in tqdm(list(zip(data.query_ids, data.query_texts, strict=True)), desc="search+rerank"):
            if qid in done:
                continue
            hits = model.search(
                query,
                index,
                k=10,
                rerank=True,
                rerank_top=args.rerank_top,
                instruction=task.instruction,
                rerank_scoring=args.scoring,
                batch_size=args.batch_size,
                **encode_kwargs,
            )
            by_embedding = sorted(hits, key=lambda h: h.retrieval_rank)
            row = {
                "qid": qid,
                "embedding": [data.doc_ids[h.index] for h in by_embedding],
                "reranked": [data.doc_ids[h.index] for h in hits],
                "rerank_scores": [h.rerank_score for h in hits],
            }
            log.write(json.dumps(row) + "\n")
            log.flush()
            done[qid] = row
    search_seconds = time.perf_counter() - t0

    per_query = {
        qid: (
            ndcg_at_k(done[qid]["embedding"], data.qrels[qid], 10),
            ndcg_at_k(done[qid]["reranked"], data.qrels[qid], 10),
        )
        for qid in data.query_ids
    }
    before = np.array([v[0] for v in per_query.values()])
    after = np.array([v[1] for v in per_query.values()])
    result = {
        "config": config,
        "git_commit": git_commit(),
        "ndcg@10": {"embedding": float(before.mean()), "embedding+rerank": float(after.mean())},
        "queries_improved": int((after > before + 1e-9).sum()),
        "queries_hurt": int((after < before - 1e-9).sum()),
        "queries_unchanged": int((np.abs(after - before) <= 1e-9).sum()),
        "seconds": {"embed_documents (0 when cached)": embed_seconds, "search_and_rerank (this run)": search_seconds},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    tag = f"-{Path(args.adapter).name}" if args.adapter and args.adapter != "none" else ""
    path = args.out / f"result-{args.method}{tag}-{args.scoring}{'-limit' + str(args.limit) if args.limit else ''}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(json.dumps(result["ndcg@10"] | {"improved": result["queries_improved"], "hurt": result["queries_hurt"]}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
