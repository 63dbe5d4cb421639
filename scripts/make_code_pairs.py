"""Write a contrastive training file of (description -> Python function) pairs from Python's standard library.

No training file holds code, and the dev suite's cosqa task (web queries against Python functions) is where
the default trails all-MiniLM-L6-v2 the most. The pairs follow CodeSearchNet's recipe (Husain et al., 2019,
arXiv:1909.09436): the query is the first paragraph of a function's docstring, the positive is the function's
source with its docstring removed. The standard library (PSF licence) is on every machine that runs
genembed, so the file is rebuilt, not shipped; the same Python version gives the same rows (3.11.7 here).

Kept: public functions and methods (no leading underscore) outside test, idle and demo folders, whose
summary holds 4 to 60 words and whose body (docstring removed) holds 3 to 40 lines. Rows are shuffled with a
seed and written with the instruction below, no negatives (mine them, or let in-batch negatives serve).

    python scripts/make_code_pairs.py --out runs/data/code-pairs.jsonl --limit 3000 --seed 0
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sysconfig
import textwrap
from pathlib import Path

INSTRUCTION = "Given a description of what a Python function does, retrieve the function."
SKIP_PARTS = {"test", "tests", "idlelib", "turtledemo", "lib2to3", "site-packages", "__pycache__", "ensurepip"}


def summary(docstring: str) -> str:
    """The first paragraph of a docstring on one line."""
    return " ".join(docstring.strip().split("\n\n")[0].split())


def without_docstring(source: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The function's source with its docstring statement removed (line-based, as the source was written)."""
    lines = source.splitlines()
    doc = node.body[0]
    start, end = doc.lineno - node.lineno, doc.end_lineno - node.lineno + 1  # relative to the def line
    kept = lines[:start] + lines[end:]
    return textwrap.dedent("\n".join(line for line in kept if line.strip()))


def pairs(path: Path) -> list[dict[str, str]]:
    """The (summary, code) pairs of one module."""
    try:
        text = path.read_text("utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
            continue
        docstring = ast.get_docstring(node)
        if not docstring:
            continue
        query = summary(docstring)
        source = ast.get_source_segment(text, node, padded=True)
        if source is None or not 4 <= len(query.split()) <= 60:
            continue
        code = without_docstring(source, node)
        if not 3 <= len(code.splitlines()) <= 40:
            continue
        out.append({"query": query, "pos": [code]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["stdlib"]), help="modules to read")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=3000, help="rows kept after shuffling (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows, seen = [], set()
    for path in sorted(args.root.rglob("*.py")):
        if SKIP_PARTS & set(path.relative_to(args.root).parts):
            continue
        for row in pairs(path):
            if row["query"] not in seen and row["pos"][0] not in seen:  # one row per summary and per body
                seen.update((row["query"], row["pos"][0]))
                rows.append(row)
    random.Random(args.seed).shuffle(rows)
    rows = rows[: args.limit] if args.limit else rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({**row, "neg": [], "instruction": INSTRUCTION}, ensure_ascii=False) + "\n")
    tmp.replace(args.out)
    print(f"{len(rows)} pairs from {args.root} -> {args.out}")


if __name__ == "__main__":
    main()
