"""Peak memory of ``genembed encode`` against corpus size: streaming keeps it flat.

For each (model, number of documents) it writes a JSON-lines corpus of short documents (dev-set
sentences, cycled), runs ``genembed encode`` in a fresh process under ``/usr/bin/time -v`` and records the
maximum resident set size and the wall time. The default model runs GIRCSE K=5 (the default method);
the tiny random model (saved to a temporary folder) shows the same on much larger corpora.

Run (2 CPU cores, about 6 minutes; under the shared lock):

    flock /tmp/genembed-cpu.lock .venv/bin/python benchmarks/encode_memory.py \\
        --out benchmarks/results/encode_memory

Writes ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _run_info import REPO, git_commit

DEV = REPO.parent / "shared" / "data" / "dev"


def sentences() -> list[str]:
    """Distinct short texts from the dev STS and classification tasks."""
    seen: dict[str, None] = {}
    for name, fields in [("stsb-dev/pairs.jsonl", ("s1", "s2")), ("emotion-dev/test.jsonl", ("text",))]:
        path = DEV / name
        if path.is_file():
            for line in path.open():
                row = json.loads(line)
                for f in fields:
                    seen.setdefault(row[f], None)
    return list(seen) or ["A man is playing a guitar on the stage.", "The quick brown fox jumps over the lazy dog."]


def write_corpus(path: Path, n: int, texts: list[str]) -> None:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"d{i}", "text": texts[i % len(texts)]}) + "\n")


def run(corpus: Path, out: Path, model: str | None) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "genembed.cli.app", "encode", str(corpus), "--out", str(out)]
    cmd += ["--quiet", *(["--model", model] if model else [])]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", done.stderr).group(1)
    seconds = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    return {"peak_rss_mb": round(rss / 1024, 1), "wall_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real-sizes", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--tiny-sizes", type=int, nargs="*", default=[1000, 10000, 100000])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "encode_memory")
    args = parser.parse_args()

    texts = sentences()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        from genembed.backbone import tiny_backbone

        tiny = tiny_backbone()
        tiny.model.save_pretrained(tmp / "tiny")
        tiny.tokenizer.save_pretrained(tmp / "tiny")
        for label, model, sizes in [
            ("default model", None, args.real_sizes),
            ("tiny model", str(tmp / "tiny"), args.tiny_sizes),
        ]:
            for n in sizes:
                corpus = tmp / f"corpus-{n}.jsonl"
                write_corpus(corpus, n, texts)
                result = run(corpus, tmp / f"out-{label}-{n}", model)
                rows.append({"model": label, "documents": n, **result})
                rss, wall = result["peak_rss_mb"], result["wall_seconds"]
                print(f"{label:<14} {n:>7} docs: peak RSS {rss:8.1f} MB, {wall:7.1f} s", flush=True)
    from genembed.backbone import default_dtype

    report = {
        "config": {
            "method": "gircse",
            "steps": 5,
            "shard_size": 4096,
            "batch_size": 32,
            "dtype": default_dtype("cpu"),  # genembed encode's --dtype auto on this machine
            "distinct_texts": len(texts),
        },
        "git_commit": git_commit(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
