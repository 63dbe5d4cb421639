"""Encoding throughput on the default model, side by side in one run: genembed (single pass and GIRCSE
K = 1, 5, 20; the fast path and the plain transformers path; float32 and bfloat16), sentence-transformers
with mean pooling on the same backbone folder, and a bare transformers forward (the floor any wrapper
pays). Also the machine's measured matmul peak and each system's model FLOP utilisation (MFU).

Run (2 CPU cores: about 15 minutes with the defaults; under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/encode_throughput.py \\
        --out benchmarks/results/encode_throughput

Texts: windows of exactly 32 and 128 tokens cut from ``../shared/data/dev/scifact-dev/corpus.jsonl``
(else the bundled sample corpus). Every system encodes the same texts with the same batch size; the
systems are interleaved round by round and each one's fastest round is reported (the machine is shared,
so slower rounds measure other people's jobs). Writes ``OUT.json`` (config, git commit, every timing)
and ``OUT.png``.

MFU = model FLOPs / wall time / peak. Model FLOPs count every matmul the embedding needs: 2 x (linear
weights) per processed token, attention scores and values over each token's causal context, and per
GIRCSE step and text one token through the stack plus the vocabulary projection and ``p @ E``
(2 x 2 x V x D). The peak is the best of ``torch.mm`` (MKL) and oneDNN on a 2048^3 product, in the
dtype of the run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from _run_info import REPO, git_commit

CORPUS = REPO.parent / "shared" / "data" / "dev" / "scifact-dev" / "corpus.jsonl"


def _cpu_info() -> dict:
    info = {"processor": platform.processor(), "threads": torch.get_num_threads(), "torch": torch.__version__}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)"):
                info[key.strip()] = value.strip()
            if key.strip() == "Flags":
                info["avx512_bf16"] = "avx512_bf16" in value.split()
                info["amx_bf16"] = "amx_bf16" in value.split()
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 8) -> dict[str, float]:
    """Best GFLOP/s of an ``n x n x n`` product through ``torch.mm`` and through oneDNN."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    bt = b.t().contiguous()
    runs = {
        "torch.mm": lambda: torch.mm(a, b),
        "onednn": lambda: torch.ops.mkldnn._linear_pointwise(a, bt, None, "none", [], ""),
    }
    out = {}
    with torch.inference_mode():
        for name, run in runs.items():
            run()
            best = min(_timed(run) for _ in range(reps))
            out[name] = round(2 * n**3 / best / 1e9, 1)
    out["peak"] = max(out.values())
    return out


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def fixed_length_texts(tokenizer, n: int, length: int) -> list[str]:
    """``n`` texts of exactly ``length`` tokens: consecutive windows of corpus documents."""
    if CORPUS.is_file():
        docs = [json.loads(line) for line in CORPUS.open()]
        docs = [f"{d['title']} {d['text']}" for d in docs]
    else:
        from importlib import resources

        raw = resources.files("genembed").joinpath("data", "sample_corpus.jsonl").read_text()
        docs = [json.loads(line)["text"] for line in raw.splitlines() if line.strip()] * 50
    texts = []
    for ids in tokenizer(docs, add_special_tokens=False)["input_ids"]:
        for start in range(0, len(ids) - length + 1, length):
            text = tokenizer.decode(ids[start : start + length])
            if len(tokenizer(text, add_special_tokens=False)["input_ids"]) == length:
                texts.append(text)
            if len(texts) == n:
                return texts
    raise ValueError(f"found only {len(texts)} windows of {length} tokens; ask for fewer texts")


@dataclass
class System:
    name: str
    run: Callable[[list[str]], np.ndarray]
    flops: float  # model FLOPs to encode the benchmark texts once
    dtype: str = "float32"
    seconds: list[float] = field(default_factory=list)


def model_flops(config, prompt_lengths: list[int], steps: int = 0) -> float:
    """Matmul FLOPs of one pass over prompts of these lengths, plus ``steps`` GIRCSE steps per prompt.

    GIRCSE needs the prompt's last position only from the last layer's output, so that layer's query
    projection, attention output, o_proj and MLP are counted for one position per prompt (the fast path
    computes exactly that).
    """
    d, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    hd = getattr(config, "head_dim", None) or d // heads
    q_o = 2 * d * heads * hd  # q_proj + o_proj weights
    kv_w = 2 * d * kv * hd
    mlp = 3 * d * inter
    per_token_layer = 2 * (q_o + kv_w + mlp)
    total = 0.0
    for p in prompt_lengths:
        attention = 4 * heads * hd * p * (p + 1) / 2  # QK^T and AV over the causal context
        if steps == 0:
            total += layers * (per_token_layer * p + attention)
        else:
            last_layer = 2 * kv_w * p + 2 * (q_o + mlp) + 4 * heads * hd * p
            total += (layers - 1) * (per_token_layer * p + attention) + last_layer
            for k in range(1, steps + 1):
                ctx = p + k
                total += layers * (per_token_layer + 4 * heads * hd * ctx)
                total += 2 * 2 * config.vocab_size * d  # lm head and p @ E
    return total


@functools.cache
def load_models(bf16: bool) -> tuple:
    """genembed float32 (and bfloat16) models, and sentence-transformers on the same backbone folder."""
    from sentence_transformers import SentenceTransformer, models

    import genembed

    model = genembed.load(adapter=False, dtype="float32")
    # Pinned to the plain text modality: by default sentence-transformers 6 wraps every text of a model that
    # has a chat template in that template (with SmolLM2's long default system prompt), which changes the
    # embedding and adds ~30 tokens per text; mean pooling over the text itself is the like-for-like baseline.
    transformer = models.Transformer(
        model.backbone.path,
        modality_config={"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
        module_output_name="token_embeddings",
    )
    pooling = models.Pooling(model.dim, "mean")
    st = SentenceTransformer(modules=[transformer, pooling], device="cpu").eval()
    return model, (genembed.load(adapter=False, dtype="bfloat16") if bf16 else None), st


def build_systems(texts: list[str], batch_size: int, bf16: bool) -> tuple[list[System], dict]:
    from genembed.encoders import encode_prompts

    model, half, st = load_models(bf16)
    tok, config, folder = model.backbone.tokenizer, model.backbone.model.config, model.backbone.path
    auto_model = st[0].auto_model  # the same transformers LlamaModel that sentence-transformers runs

    def lengths(fmt: str) -> list[int]:
        return [len(p.ids) for p in encode_prompts(tok, texts, prompt_format=fmt)]

    plain, chat = lengths("plain"), lengths("chat")
    st_lengths = [len(ids) for ids in tok(texts)["input_ids"]]

    def transformers_forward(batch_texts: list[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for i in range(0, len(batch_texts), batch_size):
                enc = tok(batch_texts[i : i + batch_size], padding=True, return_tensors="pt")
                out.append(auto_model(**enc).last_hidden_state[:, -1].numpy())
        return np.concatenate(out)

    def genembed_run(
        m, method: str, steps: int = 5, fast: bool = True, fmt: str | None = None, batch: int = batch_size
    ):
        def run(batch_texts: list[str]) -> np.ndarray:
            previous = os.environ.get("GENEMBED_FAST_PATH")
            os.environ["GENEMBED_FAST_PATH"] = "1" if fast else "0"  # read by FastDecoder.build at each encode
            try:
                return m.encode(
                    batch_texts,
                    method=method,
                    steps=steps,
                    prompt_format=fmt,
                    batch_size=batch,
                    show_progress_bar=False,
                )
            finally:
                if previous is None:
                    del os.environ["GENEMBED_FAST_PATH"]
                else:
                    os.environ["GENEMBED_FAST_PATH"] = previous

        return run

    systems = [
        System("transformers forward (floor)", transformers_forward, model_flops(config, st_lengths)),
        System(
            "sentence-transformers mean",
            lambda t: st.encode(t, batch_size=batch_size, normalize_embeddings=True),
            model_flops(config, st_lengths),
        ),
        System("genembed mean", genembed_run(model, "mean"), model_flops(config, plain)),
        System(
            "genembed mean (transformers path)", genembed_run(model, "mean", fast=False), model_flops(config, plain)
        ),
        System("genembed mean, chat prompt", genembed_run(model, "mean", fmt="chat"), model_flops(config, chat)),
    ]
    for k in (1, 5, 20):
        systems.append(System(f"genembed gircse K={k}", genembed_run(model, "gircse", k), model_flops(config, chat, k)))
    systems.append(
        System(
            f"genembed gircse K=5, batch {4 * batch_size}",
            genembed_run(model, "gircse", 5, batch=4 * batch_size),
            model_flops(config, chat, 5),
        )
    )
    systems.append(
        System(
            "genembed gircse K=5 (transformers path)",
            genembed_run(model, "gircse", 5, fast=False),
            model_flops(config, chat, 5),
        )
    )
    if half is not None:
        systems += [
            System("genembed mean bf16", genembed_run(half, "mean"), model_flops(config, plain), "bfloat16"),
            System(
                "genembed mean, chat prompt bf16",
                genembed_run(half, "mean", fmt="chat"),
                model_flops(config, chat),
                "bfloat16",
            ),
            System(
                "genembed gircse K=5 bf16", genembed_run(half, "gircse", 5), model_flops(config, chat, 5), "bfloat16"
            ),
        ]
    info = {
        "model": model.name,
        "folder": folder,
        "prompt_tokens": {"plain": sum(plain), "chat": sum(chat), "sentence-transformers": sum(st_lengths)},
    }
    return systems, info


def check_same_embeddings(systems: list[System], texts: list[str]) -> dict[str, float]:
    """Min cosine between embeddings that should agree (same pooling, different code)."""
    by_name = {s.name: s for s in systems}
    sample = texts[:16]

    def cos(a: str, b: str) -> float:
        x, y = by_name[a].run(sample), by_name[b].run(sample)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        y = y / np.linalg.norm(y, axis=1, keepdims=True)
        return round(float((x * y).sum(1).min()), 7)

    pairs = [
        ("genembed mean", "sentence-transformers mean"),
        ("genembed mean", "genembed mean (transformers path)"),
        ("genembed gircse K=5", "genembed gircse K=5 (transformers path)"),
    ]
    if "genembed mean bf16" in by_name:
        pairs += [("genembed mean", "genembed mean bf16"), ("genembed gircse K=5", "genembed gircse K=5 bf16")]
    return {f"{a} vs {b}": cos(a, b) for a, b in pairs}


def measure(length: int, args: argparse.Namespace, peaks: dict) -> dict:
    tok = load_models(not args.no_bf16)[0].backbone.tokenizer
    texts = fixed_length_texts(tok, args.texts, length)
    systems, info = build_systems(texts, args.batch_size, not args.no_bf16)
    agreement = check_same_embeddings(systems, texts)
    for s in systems:  # warm-up: allocator, oneDNN primitive caches
        s.run(texts[: args.batch_size])
    for round_ in range(args.rounds):
        for s in systems:
            s.seconds.append(_timed(lambda s=s: s.run(texts)))
            print(f"  {length} tokens, round {round_ + 1}: {s.name:<42} {s.seconds[-1]:7.2f} s", flush=True)
    base = {s.name: min(s.seconds) for s in systems}
    rows = []
    for s in systems:
        best = min(s.seconds)
        peak = peaks["float32" if s.dtype == "float32" else "bfloat16"]["peak"]
        rows.append(
            {
                "system": s.name,
                "dtype": s.dtype,
                "seconds": round(best, 3),
                "all_seconds": [round(x, 3) for x in s.seconds],
                "text_tokens_per_s": round(len(texts) * length / best, 1),
                "x_vs_sentence_transformers": round(base["sentence-transformers mean"] / best, 3),
                "time_vs_genembed_mean": round(best / base["genembed mean"], 3),
                "time_vs_genembed_mean_chat": round(best / base["genembed mean, chat prompt"], 3),
                "model_gflops": round(s.flops / 1e9, 1),
                "achieved_gflops_per_s": round(s.flops / best / 1e9, 1),
                "mfu": round(s.flops / best / 1e9 / peak, 3),
            }
        )
    k1, k20 = base["genembed gircse K=1"], base["genembed gircse K=20"]
    per_step = (k20 - k1) / 19
    return {
        "text_tokens": length,
        "texts": len(texts),
        **info,
        "embedding_agreement_min_cosine": agreement,
        "gircse_seconds_per_step": round(per_step, 4),
        "gircse_seconds_per_step_per_batch": round(per_step / -(-len(texts) // args.batch_size), 5),
        "rows": rows,
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(7 * len(results), 5.5), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        rows = res["rows"]
        names = [r["system"] for r in rows]
        values = [r["text_tokens_per_s"] for r in rows]
        colors = ["#999999" if not r["system"].startswith("genembed") else "#3b75af" for r in rows]
        ax.barh(names[::-1], values[::-1], color=colors[::-1])
        for y, (v, r) in enumerate(zip(values[::-1], rows[::-1], strict=True)):
            ax.text(v, y, f" {v:,.0f}  (MFU {r['mfu']:.0%})", va="center", fontsize=8)
        ax.set_xlabel("text tokens / s (higher is better)")
        ax.set_title(f"{res['texts']} texts of {res['text_tokens']} tokens")
        ax.set_xlim(0, max(values) * 1.35)
    fig.suptitle(f"encoding throughput, {results[0]['model']}, CPU", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(report: dict) -> str:
    """The results as markdown tables (one per text length), as docs/performance.md shows them."""
    peak = report["matmul_peak_gflops"]
    lines = [
        f"Matmul peak (2048^3, best of torch.mm and oneDNN): float32 {peak['float32']['peak']:.0f} GFLOP/s "
        f"(torch.mm {peak['float32']['torch.mm']:.0f}), bfloat16 {peak['bfloat16']['peak']:.0f} GFLOP/s.",
    ]
    for res in report["results"]:
        lines += [
            "",
            f"**{res['texts']} texts x {res['text_tokens']} tokens**, batch {report['config']['batch_size']}, "
            f"best of {report['config']['rounds']} rounds:",
            "",
            "| system | s | text tokens/s | x ST | time / genembed mean | time / mean, chat prompt | MFU |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in res["rows"]:
            lines.append(
                f"| {r['system']} | {r['seconds']:.2f} | {r['text_tokens_per_s']:,.0f} | "
                f"{r['x_vs_sentence_transformers']:.2f} | {r['time_vs_genembed_mean']:.2f} | "
                f"{r['time_vs_genembed_mean_chat']:.2f} | {r['mfu']:.0%} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=256, help="texts per length")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128], help="tokens per text")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved timing rounds (the best is kept)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 systems")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "encode_throughput")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    peaks = {"float32": matmul_peak(torch.float32), "bfloat16": matmul_peak(torch.bfloat16)}
    print("matmul peak GFLOP/s:", peaks, flush=True)
    results = [measure(length, args, peaks) for length in args.lengths]
    peaks_after = {"float32": matmul_peak(torch.float32), "bfloat16": matmul_peak(torch.bfloat16)}
    report = {
        "config": {**vars(args), "out": str(args.out)},
        "git_commit": git_commit(),
        "machine": _cpu_info(),
        "matmul_peak_gflops": peaks,
        "matmul_peak_gflops_after": peaks_after,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    plot(results, args.out.with_suffix(".png"))
    table = markdown(report)
    args.out.with_suffix(".md").write_text(table)
    print("\n" + table)
    print(f"wrote {args.out.with_suffix('.json')}, {args.out.with_suffix('.md')} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
