"""The joint stages' learning curve: generation recovered (held-aside chat and plain-text perplexity) against
the joint steps, with the dev mean where a point was scored on the dev protocol.

Each ``--point STEPS=ADAPTER`` is an adapter folder (a run, or a checkpoint written by ``genembed
export-checkpoint RUN --step N``) after ``STEPS`` joint steps; step 0 is the embedding-only default it started
from. Perplexities are ``benchmarks/grit_generation.py``'s (held-aside self-generated chat answers, the first
128 tokens of 100 SciFact dev abstracts), with the raw backbone as the reference line; ``--dev STEPS=REPORT``
adds the K=5 mean of a ``genembed eval`` report. Writes ``OUT.json`` and ``OUT.png``:

    python experiments/joint_curve.py --point 0=src/genembed/adapters/smollm2-135m-joint \\
        --point 30=runs/joint-stage-1-step30 --point 60=runs/joint-stage-1 --point 120=runs/joint-stage-2 \\
        --dev 0=experiments/results/teacher-stages/stage-11/eval_full.json \\
        --out experiments/results/joint-stages/learning_curve
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _benchmarks  # noqa: F401  (benchmarks/ on the import path)
import torch
from _figures import save, two_panels
from grit_generation import REPO, heldout_items, perplexity, text_items

from genembed._files import atomic_write_json


def pairs(values: list[str], what: str) -> list[tuple[int, str]]:
    """``STEPS=VALUE`` arguments as (steps, value), sorted by steps."""
    out = []
    for value in values:
        steps, sep, rest = value.partition("=")
        if not sep or not steps.isdigit() or not rest:
            raise SystemExit(f"{what} {value!r}: expected STEPS=VALUE, e.g. 60=runs/joint-stage-1")
        out.append((int(steps), rest))
    return sorted(out)


def k5_mean(report: Path) -> float:
    """The K=5 mean a ``genembed eval`` report holds (x100 already)."""
    return json.loads(report.read_text())["mean"]["scores"]["K=5"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--point", action="append", default=[], help="STEPS=ADAPTER_FOLDER (repeatable)")
    parser.add_argument("--dev", action="append", default=[], help="STEPS=EVAL_REPORT.json (repeatable)")
    parser.add_argument("--heldout", type=Path, default=REPO / "runs" / "selfgen-heldout.jsonl")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    points, dev = pairs(args.point, "--point"), pairs(args.dev, "--dev")
    torch.set_num_threads(args.threads)
    import genembed

    raw = genembed.load(adapter=False, dtype="float32")
    tokenizer = raw.backbone.tokenizer
    held, texts = heldout_items(tokenizer, args.heldout, 192), text_items(tokenizer, 100, 128)
    reference = {"heldout_ppl": perplexity(raw, held), "text_ppl": perplexity(raw, texts)}
    rows = []
    for steps, folder in points:
        model = genembed.load(adapter=folder, dtype="float32")
        model.generation_adapter = True  # generate with the weights under test
        rows.append({"steps": steps, "adapter": folder, "heldout_ppl": perplexity(model, held),
                     "text_ppl": perplexity(model, texts)})  # fmt: skip
        print(rows[-1], flush=True)
    scored = [{"steps": steps, "report": report, "k5_mean": k5_mean(Path(report))} for steps, report in dev]
    result = {"raw_backbone": reference, "points": rows, "dev": scored, "heldout": str(args.heldout)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out.with_suffix(".json"), result)

    fig, axes = two_panels(10, 3.8)
    steps = [r["steps"] for r in rows]
    for key, label, marker in (("heldout_ppl", "held-aside chat answers", "o"), ("text_ppl", "SciFact text", "s")):
        axes[0].plot(steps, [r[key] / reference[key] for r in rows], marker=marker, label=label)
    axes[0].axhline(1.0, color="grey", linestyle="--", label="raw backbone")
    axes[0].set(xlabel="joint steps", ylabel="perplexity / raw backbone's", title="generation")
    axes[1].plot([d["steps"] for d in scored], [d["k5_mean"] for d in scored], marker="o", label="dev mean, K=5")
    axes[1].set(xlabel="joint steps", ylabel="dev mean at K=5 (x100)", title="embeddings")
    save(fig, axes, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')} and .png")


if __name__ == "__main__":
    main()
