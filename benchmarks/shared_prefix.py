"""Training step time with each instruction's prefix computed once per batch (``embedding.share_prefix``).

A teacher stage's steps embed texts under few instructions: a contrastive batch's queries share one, a
single-text batch of 128 texts holds a handful (documents bare, under the template alone). In the ``chat``
format the instruction and template are about a third of the prompt tokens. This times the stage's two
kinds of step on the default model (LoRA on every layer, float32, K=5), each on one fixed batch drawn
as the stage draws it, with the prefixes computed per row and once per group, alternated so that both see
the same machine load:

- contrastive: 16 queries, 1 positive and 1 hard negative each, ICR forward and backward;
- single: 128 single texts in GradCache chunks of 32 (the stage's ``grad_cache_single``: a pass without
  gradients, then each chunk again with them), against random teacher vectors; with shared prefixes both in
  length order (the order before grouping by prefix) and grouped by prefix, then by length (the order it uses).

Run on an otherwise idle machine (2 cores, about 10 minutes):

    .venv/bin/python benchmarks/shared_prefix.py --out benchmarks/results/shared_prefix.json

A batch under many instructions (the reviews' domain rows, twenty wordings) is where grouping by prefix
matters; ``--set`` takes the config overrides ``genembed train`` takes:

    .venv/bin/python benchmarks/shared_prefix.py --reps 1 \
      --set "single.files=[{path: ../shared/data/train/reviews.jsonl, symmetric: true, axes: [domain]}]" \
      --out benchmarks/results/shared_prefix_reviews.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from _run_info import REPO, git_commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "teacher-stage-reviews.yaml")
    parser.add_argument("--reps", type=int, default=2, help="timed rounds (after one warm-up round)")
    parser.add_argument("--seed", type=int, default=1, help="which batches the streams draw")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")

    import genembed
    from genembed.encoders.shared_prefix import prefix_groups, sharing_groups
    from genembed.training.config import load_config
    from genembed.training.data import ContrastiveStream, SingleStream, expand_files
    from genembed.training.forward import tokenize_texts
    from genembed.training.grad_cache import grad_cache_single, length_sorted, split_batch
    from genembed.training.setup import build_objective, init_adapter, trainable_model

    cfg = load_config(args.config, [*args.set, f"train.seed={args.seed}"])
    backbone = genembed.load(adapter=False, dtype="float32").backbone
    model = trainable_model(cfg, backbone.model, init_adapter("default"))
    teacher_dim = 768  # all-mpnet-base-v2's vectors; the values do not change the step's cost
    objective = build_objective(cfg, model, has_generative=False, targets=SimpleNamespace(dimension=teacher_dim))
    settings = objective.settings
    fmt, emb = settings.prompt_format, cfg.embedding

    batch = ContrastiveStream.from_config(cfg, 1).next()
    queries = tokenize_texts(
        backbone.tokenizer, batch.queries, batch.query_instructions, prompt_format=fmt, max_length=emb.query_max_length
    )
    documents = tokenize_texts(
        backbone.tokenizer,
        batch.documents,
        batch.document_instructions,
        prompt_format=fmt,
        max_length=emb.doc_max_length,
    )
    labels = batch.label_tensor()
    single = SingleStream(
        expand_files(cfg.single.files),
        batch_size=cfg.single.batch_size,
        seed=args.seed,
        instruction=cfg.single.instruction,
        doc_instruction=cfg.data.doc_instruction,
    )
    texts, instructions = single.next()
    single_batch = tokenize_texts(
        backbone.tokenizer, texts, instructions, prompt_format=fmt, max_length=cfg.single.max_length
    )
    vectors = torch.nn.functional.normalize(
        torch.randn(len(texts), teacher_dim, generator=torch.Generator().manual_seed(0)), dim=-1
    )

    def contrastive_step() -> None:
        q, d = (objective.embed(part) for part in (queries, documents))
        out = objective.rep_loss.terms(q, d, labels, None)
        out.total.backward()

    chunk = cfg.train.grad_cache_chunk or len(texts)

    def single_step(setting: str) -> None:
        grad_cache_single(objective, single_batch, vectors, chunk=chunk, by_prefix=setting == "shared")

    steps = {"contrastive": lambda setting: contrastive_step(), "single": single_step}
    settings_of = {"contrastive": ("per row", "shared"), "single": ("per row", "shared, length order", "shared")}
    seconds: dict[str, dict[str, list[float]]] = {kind: {s: [] for s in settings_of[kind]} for kind in steps}
    for rep in range(args.reps + 1):  # the first round warms up
        for kind, step in steps.items():
            for setting in settings_of[kind]:
                objective.share_prefix = setting != "per row"
                model.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                step(setting)
                if rep:
                    seconds[kind][setting].append(time.perf_counter() - t0)
                print(f"round {rep} {kind} {setting}: {time.perf_counter() - t0:.1f} s", flush=True)

    def tokens(*batches) -> dict[str, int]:
        total = sum(int(b.attention_mask.sum()) for b in batches)
        once = sum(sum(n * (len(rows) - 1) for rows, n in prefix_groups(b)) for b in batches)
        return {"prompt_tokens": total, "prefix_tokens_saved": once}

    def passes(by_prefix: bool) -> int:
        """Embedding passes of one GradCache round: per chunk, one per shared prefix, one for the rest."""
        total = 0
        for part in split_batch(length_sorted(single_batch, by_prefix=by_prefix)[0], chunk):
            shared, whole = sharing_groups(part, share_single=False)
            total += len(shared) + bool(whole)
        return total

    medians = {kind: {k: statistics.median(v) for k, v in times.items()} for kind, times in seconds.items()}
    ratios = {kind: m["shared"] / m["per row"] for kind, m in medians.items()}
    single = medians["single"]
    grouped_ratio = single["shared"] / single["shared, length order"]
    for kind, m in medians.items():
        print(f"{kind}: " + ", ".join(f"{k} {v:.2f} s" for k, v in m.items()) + f"; shared/per row {ratios[kind]:.2f}x")
    print(f"single, grouped by prefix over length order: {grouped_ratio:.2f}x")
    report = {
        "benchmark": "shared_prefix",
        "git_commit": git_commit(),
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads()},
        "config": {"config": str(args.config), "seed": args.seed, "reps": args.reps, "K": settings.steps},
        "batches": {
            "contrastive": tokens(queries, documents)
            | {"queries": len(batch.queries), "documents": len(batch.documents)},
            # the single step shares within each GradCache chunk, as it embeds them
            "single": tokens(*split_batch(length_sorted(single_batch, by_prefix=True)[0], chunk))
            | {"texts": len(texts), "instructions": len(set(instructions)), "chunk": chunk}
            | {
                f"passes, {order}": passes(by_prefix)
                for order, by_prefix in (("length order", False), ("grouped", True))
            },
        },
        "seconds": seconds,
        "median": medians,
        "shared_over_per_row": ratios,
        "single_grouped_over_length_order": grouped_ratio,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
