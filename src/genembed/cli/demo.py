"""``genembed demo`` (``make run``): the main job on the bundled default model.

Encodes a small sample corpus shipped with the package, answers sample queries by cosine search,
shows the soft tokens of one query, and prints where the time went.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from typing import Annotated

from genembed.encoders.instructions import DEFAULT_QUERY_INSTRUCTION

from ._common import (
    AdapterOpt,
    CenterOpt,
    DeviceOpt,
    DtypeOpt,
    MaxLengthOpt,
    ModelOpt,
    StepsOpt,
    load_model,
    top_option,
)


def _read_jsonl(name: str) -> list[dict]:
    text = resources.files("genembed").joinpath("data", name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def demo(
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
    steps: StepsOpt = None,
    top: Annotated[int, top_option("the N best results shown per query")] = 3,
    max_length: MaxLengthOpt = None,
) -> None:
    """Encode a sample corpus, search it with sample queries, and show the soft tokens of one query."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    timings: list[tuple[str, float, str]] = []

    t0 = time.perf_counter()
    loaded = load_model(model, adapter, dtype, center, device)
    settings = loaded.embed_settings(steps=steps, max_length=max_length)
    how = f"{settings.method}, K={settings.steps}" if settings.rules.uses_steps else settings.method
    timings.append(("load model", time.perf_counter() - t0, loaded.name))
    corpus, queries = _read_jsonl("sample_corpus.jsonl"), [q["text"] for q in _read_jsonl("sample_queries.jsonl")]
    docs = [d["text"] for d in corpus]
    tokens = sum(len(ids) for ids in loaded.backbone.tokenizer(docs, add_special_tokens=False)["input_ids"])

    t0 = time.perf_counter()
    doc_emb = loaded.encode_document(docs, steps=steps, max_length=max_length, batch_size=16)
    dt = time.perf_counter() - t0
    timings.append((f"encode {len(docs)} documents ({how})", dt, f"{len(docs) / dt:.1f} texts/s, {tokens} text tokens"))

    t0 = time.perf_counter()
    query_emb = loaded.encode_query(queries, steps=steps, max_length=max_length)
    timings.append((f"encode {len(queries)} queries", time.perf_counter() - t0, ""))

    scores = query_emb @ doc_emb.T
    table = Table(title=f"cosine search over {len(docs)} sample documents ({loaded.name}, {how})")
    table.add_column("query")
    table.add_column("rank", justify="right")
    table.add_column("score", justify="right")
    table.add_column("document")
    for qi, query in enumerate(queries):
        for rank, di in enumerate(scores[qi].argsort()[::-1][:top], start=1):
            table.add_row(query if rank == 1 else "", str(rank), f"{scores[qi, di]:.3f}", docs[di])
        table.add_section()
    console.print(table)

    t0 = time.perf_counter()
    steps_info = loaded.inspect(queries[0], instruction=DEFAULT_QUERY_INSTRUCTION, steps=steps, max_length=max_length)
    timings.append(("inspect one query", time.perf_counter() - t0, ""))
    tokens_table = Table(title=f"soft tokens of {queries[0]!r}: top tokens of p_k")
    tokens_table.add_column("k", justify="right")
    tokens_table.add_column("tokens (probability)")
    for step in steps_info:
        tokens_table.add_row(str(step.step), "  ".join(f"{tok!r} {p:.2f}" for tok, p in step.tokens[:6]))
    console.print(tokens_table)

    time_table = Table(title="where the time went")
    for col in ("stage", "seconds", "note"):
        time_table.add_column(col)
    for stage, seconds, note in timings:
        time_table.add_row(stage, f"{seconds:.2f}", note)
    console.print(time_table)
