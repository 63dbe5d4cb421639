"""Training loss by data file: which files a run learns and which it does not.

``metrics.jsonl`` has one record per step. Runs since the ``rows`` field was added record which files
each step's batch came from; for older runs the batches are replayed from the training config (the
data stream depends only on the files, the seed and the global batch size, see
``genembed/training/data/sampler.py``). A step is credited to the file that gave most of its rows.

    python experiments/loss_by_file.py experiments/configs/gircse-smollm2-stage3-axes.yaml \\
        runs/gircse-smollm2-stage3-axes

Writes ``loss_by_file.{json,md}`` into the run folder (or ``--out``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def step_files(config: Path, records: list[dict[str, Any]], world: int) -> list[str]:
    """The main file of every recorded step, from ``rows`` where recorded, else by replaying the stream."""
    if all("rows" in r for r in records):
        return [max(r["rows"], key=r["rows"].get) for r in records]
    from genembed.training import load_config
    from genembed.training.data import ContrastiveStream

    cfg = load_config(config)
    stream = ContrastiveStream.from_config(cfg, world)  # the stream the training loop drew from
    files = []
    for _ in range(max(r["step"] for r in records)):
        counts: Counter[str] = Counter()
        for _ in range(cfg.train.grad_accum):
            stream.next()
            counts.update(stream.last_rows)
        files.append(counts.most_common(1)[0][0])
    return [files[r["step"] - 1] for r in records]


def table(records: list[dict[str, Any]], files: list[str]) -> list[dict[str, Any]]:
    """Per file: steps, mean and last loss, and the mean stepwise loss at the first and last step."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record, name in zip(records, files, strict=True):
        by[name].append(record)
    k_max = max(int(key[2:]) for key in records[0] if key.startswith("L_"))
    rows = []
    for name, recs in sorted(by.items(), key=lambda item: -np.mean([r["loss"] for r in item[1]])):
        half = len(recs) // 2
        rows.append(
            {
                "file": name,
                "steps": len(recs),
                "mean_loss": float(np.mean([r["loss"] for r in recs])),
                "first_half": float(np.mean([r["loss"] for r in recs[:half]])) if half else None,
                "second_half": float(np.mean([r["loss"] for r in recs[half:]])),
                "L_1": float(np.mean([r["L_1"] for r in recs])),
                f"L_{k_max}": float(np.mean([r[f"L_{k_max}"] for r in recs])),
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], run: Path) -> str:
    keys = list(rows[0])
    lines = [f"# Training loss by file: {run.name}", "", "| " + " | ".join(keys) + " |"]
    lines.append("|---|" + "---:|" * (len(keys) - 1))
    for row in rows:
        cells = [row["file"], str(row["steps"])]
        cells += ["" if row[k] is None else f"{row[k]:.3f}" for k in keys[2:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the training config the run was started with")
    parser.add_argument("run", type=Path, help="the run folder (with metrics.jsonl)")
    parser.add_argument("--world", type=int, default=1, help="processes the run used (for replaying old runs)")
    parser.add_argument("--out", type=Path, default=None, help="folder for loss_by_file.{json,md} (default: the run)")
    args = parser.parse_args()

    from genembed._files import atomic_write_text as atomic_write

    metrics = args.run / "metrics.jsonl"
    if not metrics.is_file():
        raise SystemExit(f"{metrics}: no such file (is {args.run} a training run folder?)")
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not records:
        raise SystemExit(f"{metrics}: no steps recorded yet")
    rows = table(records, step_files(args.config, records, args.world))
    out = args.out or args.run
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "loss_by_file.json", json.dumps({"run": str(args.run), "files": rows}, indent=1) + "\n")
    text = markdown(rows, args.run)
    atomic_write(out / "loss_by_file.md", text)
    print(text)


if __name__ == "__main__":
    main()
