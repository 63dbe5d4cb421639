"""RAG latency per KV caching mode vs. no caching, with the default settings (CPU), as in GRIT's Figure 5.

Two sweeps, as in the GRIT paper: the query grows (250..4000 tokens) with a short passage, and the
passage grows with a short query. For every length each mode runs the same end-to-end path as
``genembed ask`` (embed the query for retrieval, search a one-passage index, assemble the cached KV
states, prefill what is not cached, decode), with a fixed number of new tokens (no EOS stop), modes
interleaved within each repetition so they see the same machine conditions. Reported per mode: time
to first token (TTFT) and total time, their medians, and their ratios to ``none`` measured in the
same run. The passage's KV states come from a real index on disk (float16, memory-mapped), as
``genembed index build --store-kv`` writes them. Also writes the KV storage sizes (measured on disk for
float32/float16/bfloat16, and computed for a 7B model) and a PNG plot.

The model is ``genembed.load()`` (the shipped GIRCSE adapter embeds; the base weights generate), unless
``--adapter`` says otherwise. With it, a cached query's states cannot come from its embedding pass
(other weights): they are computed when answering, so query caching saves nothing. ``--adapter none
--prompt matching`` measures what query caching saves when they can (the raw backbone, whose GIRCSE
pass is the generator's, and ``RagPrompt.matching_queries``, whose query segment starts the query's
embedding prompt).

Run (one thread; about 10 minutes for the first, 5 for the second):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_latency.py --lengths 4000 --threads 1
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_latency.py --lengths 4000 --threads 1 \
        --adapter none --prompt matching --modes none query docquery --sweeps query --no-storage

Selective recomputation (:mod:`genembed.retrieval.kv_blend`) matters only with several passages (the
first one after the head is exact): ``--passages 4`` splits the long passage into four retrieved ones of
a quarter of its length each, and ``--recompute 0.2`` adds a ``<mode>@0.2`` row per caching mode:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rag_latency.py --lengths 4000 --threads 1 --sweeps doc \
        --passages 4 --modes none doc docquery --recompute 0.2 --no-storage
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _run_info import REPO, git_commit

MODES = ("none", "query", "doc", "querydoc", "docquery")
GRIT_CPU_4000 = {"query": 0.54, "doc": 0.63}  # GRIT paper: latency reduction at 4000 tokens on CPU
MISTRAL_7B = {"layers": 32, "kv_heads": 8, "head_dim": 128}  # GritLM-7B's KV geometry
GRIT_INDEX = {"passages": 2_681_468, "bytes": 30e12}  # GRIT: ~30 TB of doc caches for 2.68M passages


def _text_of(tokenizer, n_tokens: int, seed_text: str) -> str:
    """Text of about ``n_tokens`` tokens (the sample corpus repeated and cut)."""
    ids = tokenizer(seed_text, add_special_tokens=False)["input_ids"]
    ids = (ids * (n_tokens // len(ids) + 1))[:n_tokens]
    return tokenizer.decode(ids)


def _one_run(
    model, index, question: str, mode: str, new_tokens: int, *, top_k: int = 1, recompute: float = 0.0
) -> dict[str, float]:
    from genembed.generation.adapters import adapter_mode
    from genembed.generation.decoding import decode_stream
    from genembed.retrieval.context import fresh_input, mode_layout
    from genembed.retrieval.rag import build_context, retrieve

    start = time.perf_counter()
    query, sources = retrieve(model, index, question, top_k=top_k, keep_query_kv=mode_layout(mode)[1])
    t_retrieved = time.perf_counter()
    context = build_context(model, index, query, sources, mode=mode, recompute=recompute)
    t_assembled = time.perf_counter()
    ids, mask, positions = fresh_input(context, "cpu")
    with adapter_mode(model.backbone.model, model.generation_adapter):  # the generation weights
        tokens = decode_stream(
            model.backbone.model,
            ids,
            cache=context.cache,
            attention_mask=mask,
            position_ids=positions,
            max_new_tokens=new_tokens,
        )
        next(tokens)
        t_first = time.perf_counter()
        n = 1 + sum(1 for _ in tokens)
    end = time.perf_counter()
    return {
        "retrieve": t_retrieved - start,
        "assemble": t_assembled - t_retrieved,
        "ttft": t_first - start,
        "total": end - start,
        "new_tokens": n,
        "prompt_tokens": context.total_tokens,
        "cached_tokens": context.cached_tokens,
        "recomputed_tokens": context.recomputed,
    }


def _storage(model, tmp: Path, passage: str, prompt) -> dict:
    from genembed.retrieval.index_build import build_index
    from genembed.retrieval.kv_store import KVGeometry, kv_bytes_per_token

    doc = tmp / "storage.jsonl"
    doc.write_text(json.dumps({"id": "p", "text": passage}) + "\n")
    geometry = KVGeometry.of(model.backbone.model.config)
    measured = {}
    for dtype in ("float32", "float16", "bfloat16"):
        index = build_index(
            model,
            [doc],
            tmp / f"store-{dtype}",
            store_kv=True,
            kv_dtype=dtype,
            chunk_tokens=4096,
            show_progress_bar=False,
            prompt=prompt,
        )
        tokens = index.kv(0)[0].shape[2]
        measured[dtype] = {
            "tokens": tokens,
            "bytes": index.kv_store.nbytes,
            "bytes_per_token": index.kv_store.nbytes / tokens,
        }
    seven_b = {d: kv_bytes_per_token(**MISTRAL_7B, dtype=d) for d in ("float32", "bfloat16")}
    implied_tokens = GRIT_INDEX["bytes"] / GRIT_INDEX["passages"] / seven_b["bfloat16"]
    return {
        "default_model": {
            "geometry": vars(geometry),
            "bytes_per_token": {d: geometry.bytes_per_token(d) for d in ("float32", "float16", "bfloat16")},
            "measured_on_disk": measured,
        },
        "mistral_7b": {
            "geometry": MISTRAL_7B,
            "bytes_per_token": seven_b,
            "grit_index": GRIT_INDEX,
            "tokens_per_passage_implied_by_30TB_in_bf16": implied_tokens,
            "bytes_for_2.68M_passages_of_100_tokens": {d: b * 100 * GRIT_INDEX["passages"] for d, b in seven_b.items()},
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    parser.add_argument("--short", type=int, default=16, help="tokens of the side that does not grow")
    parser.add_argument("--repeats", type=int, default=2, help="repetitions per point (median reported)")
    parser.add_argument("--new-tokens", type=int, default=16, help="generated tokens per answer")
    parser.add_argument("--method", default="gircse", help="index embedding method (gircse, mean, grit)")
    parser.add_argument("--adapter", default=None, help="adapter folder or 'none' (default: the shipped one)")
    parser.add_argument("--prompt", default="default", choices=["default", "matching"], help="the RAG prompt")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="modes (none always runs)")
    parser.add_argument("--sweeps", nargs="+", default=["query", "doc"], choices=["query", "doc"])
    parser.add_argument("--passages", type=int, default=1, help="passages the long side is split into (doc sweep)")
    parser.add_argument("--recompute", type=float, nargs="*", default=[], help="shares for <mode>@<share> rows")
    parser.add_argument("--no-storage", action="store_true", help="skip the KV storage measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "rag_latency")
    args = parser.parse_args()

    import genembed
    from genembed.encoders.settings import EmbedSettings, IndexEmbedSettings
    from genembed.generation.rag_prompt import RagPrompt
    from genembed.retrieval.index_build import build_index

    torch.set_num_threads(args.threads)
    model = genembed.load(adapter=False if args.adapter == "none" else args.adapter, dtype="float32")
    tok = model.backbone.tokenizer
    corpus = (REPO / "src" / "genembed" / "data" / "sample_corpus.jsonl").read_text().splitlines()
    seed_text = " ".join(json.loads(line)["text"] for line in corpus)
    longest = max(args.lengths)
    embed = EmbedSettings(method=args.method, tau=model.tau, max_length=longest + 256)
    config = IndexEmbedSettings(embed=embed, center=model.center)
    prompt = RagPrompt()
    if args.prompt == "matching":
        prompt = RagPrompt.matching_queries(config.query_instruction, config.prompt_format)
    modes = ["none", *(m for m in args.modes if m != "none")]
    variants = {m: (m, 0.0) for m in modes}  # row name -> (cache mode, share recomputed)
    variants |= {f"{m}@{r:g}": (m, r) for r in args.recompute for m in modes if m != "none"}
    modes = list(variants)
    results: dict[str, dict] = {sweep: {} for sweep in args.sweeps}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for sweep in args.sweeps:
            for length in args.lengths:
                q_len, d_len = (length, args.short) if sweep == "query" else (args.short, length)
                question = _text_of(tok, q_len, seed_text) + "?"
                doc = tmp / f"{sweep}-{length}.jsonl"
                n_passages = args.passages if sweep == "doc" else 1
                doc.write_text(
                    "".join(
                        json.dumps({"id": f"p{i}", "text": _text_of(tok, d_len // n_passages, seed_text[i:])}) + "\n"
                        for i in range(n_passages)
                    )
                )
                index = build_index(
                    model,
                    [doc],
                    tmp / f"index-{sweep}-{length}",
                    settings=config,
                    store_kv=True,
                    kv_dtype="float16",
                    chunk_tokens=longest + 16,
                    show_progress_bar=False,
                    prompt=prompt,
                )
                _one_run(model, index, question, "none", 2, top_k=n_passages)  # warm-up (allocator, thread pool)
                runs: dict[str, list[dict]] = {m: [] for m in modes}
                for _ in range(args.repeats):
                    for mode in modes:
                        cache_mode, share = variants[mode]
                        run = _one_run(
                            model, index, question, cache_mode, args.new_tokens, top_k=n_passages, recompute=share
                        )
                        runs[mode].append(run)
                point = {
                    mode: {
                        "ttft_s": statistics.median(r["ttft"] for r in rs),
                        "total_s": statistics.median(r["total"] for r in rs),
                        "assemble_s": statistics.median(r["assemble"] for r in rs),
                        "prompt_tokens": rs[0]["prompt_tokens"],
                        "cached_tokens": rs[0]["cached_tokens"],
                        "recomputed_tokens": rs[0]["recomputed_tokens"],
                        "runs": rs,
                    }
                    for mode, rs in runs.items()
                }
                for mode in modes:
                    for key in ("ttft", "total"):
                        point[mode][f"{key}_ratio_vs_none"] = point[mode][f"{key}_s"] / point["none"][f"{key}_s"]
                results[sweep][str(length)] = point
                line = "  ".join(
                    f"{m} TTFT {point[m]['ttft_s']:.2f}s ({point[m]['ttft_ratio_vs_none']:.2f})" for m in modes
                )
                print(f"{sweep:5s} {length:5d}: {line}", flush=True)
        storage = None if args.no_storage else _storage(model, tmp, _text_of(tok, 1000, seed_text), prompt)
    report = {
        "config": {
            **vars(args),
            "out": str(args.out),
            "model": model.name,
            "generation_adapter": model.generation_adapter,
            "rag_prompt": prompt.to_dict(),
            "torch": torch.__version__,
        },
        "machine": {"platform": platform.platform(), "cpus": torch.get_num_threads()},
        "git_commit": git_commit(),
        "grit_paper_cpu_reduction_at_4000": GRIT_CPU_4000,
        "results": results,
        "storage": storage,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "rag_latency" + ("" if args.adapter is None else f"_{Path(args.adapter).name}") + f"_{args.prompt}"
    name += (f"_{args.passages}passages" if args.passages > 1 else "") + "".join(
        f"_recompute{r:g}" for r in args.recompute
    )
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2))
    if len(args.lengths) > 1 and len(results) == 2:
        _plot(results, args.out / f"{name}.png", model.name, args.new_tokens, modes)
    print(f"wrote {args.out / name}.json")


def _plot(results: dict, path: Path, model_name: str, new_tokens: int, modes: list[str]) -> None:
    """Top: total seconds per mode. Bottom: total time as a ratio to ``none``, with GRIT's CPU figures at 4000."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for col, sweep in enumerate(("query", "doc")):
        lengths = sorted(int(n) for n in results[sweep])
        grows = "query" if sweep == "query" else "passage"
        for row, key in enumerate(("total_s", "total_ratio_vs_none")):
            ax = axes[row, col]
            for mode in modes:
                ax.plot(lengths, [results[sweep][str(n)][mode][key] for n in lengths], marker="o", label=mode)
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(lengths, [str(n) for n in lengths])
            ax.grid(alpha=0.3)
        axes[0, col].set_title(f"total time, {grows} length grows")
        axes[0, col].set_ylabel("seconds")
        axes[1, col].set_title(f"total time / no caching, {grows} length grows")
        axes[1, col].set_ylabel("ratio to none")
        axes[1, col].axhline(1.0, color="gray", lw=0.8)
        grit_mode = "query" if sweep == "query" else "doc"
        (star,) = axes[1, col].plot([4000], [1 - GRIT_CPU_4000[grit_mode]], marker="*", ms=14, color="black", ls="")
        axes[1, col].legend([star], [f"GRIT paper: {grit_mode} caching, 7B, CPU"], fontsize=8)
        axes[1, col].set_xlabel(f"{grows} tokens")
    axes[0, 0].legend()
    fig.suptitle(f"RAG latency by KV caching mode ({model_name}, CPU, {new_tokens} new tokens)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
