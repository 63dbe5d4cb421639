"""Write the published models' per-task MTEB instructions into package data, from the authors' code.

The instruction strings are data the authors published with their evaluation code; this script reads
them out of a git checkout of each repository (as Python literals, with ``ast``; no code of theirs is
run or copied) and writes them, with their source and commit, to ``src/genembed/data/``:

    python scripts/extract_published_instructions.py \\
        --gircse /path/to/Roytsai27/GIRCSE --gritlm /path/to/ContextualAI/gritlm \\
        --llm2vec /path/to/McGill-NLP/llm2vec

- ``instructions_gircse.json``: ``DATASET2INSTUCT`` of GIRCSE's ``embedding/instructions.py`` (what
  ``embedding/mteb_eval.py`` evaluates with).
- ``instructions_gritlm.json``: the ``"e5"`` set of ``SET_TO_TASK_TO_DS_TO_PROMPT`` in gritlm's
  ``evaluation/eval_mteb.py`` (its default ``--instruction_set``, the one its README's MTEB command
  uses), flattened from task type -> task -> instruction to task -> instruction.
- ``instructions_llm2vec.json``: llm2vec's ``test_configs/mteb/task_to_instructions.json`` (what its
  ``experiments/mteb_eval.py`` passes to mteb's LLM2Vec wrapper, which embeds retrieval and reranking
  documents with no instruction: ``encode_corpus``); those tasks' entries become ``{query, corpus: ""}``,
  by their type in mteb's task metadata (``pip install mteb``).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "genembed" / "data"

SOURCES = {
    "gircse": {
        "repo": "https://github.com/Roytsai27/GIRCSE",
        "path": "embedding/instructions.py",
        "name": "DATASET2INSTUCT",
        "license": "MIT",
        # embedding/base.py get_instruction: ".v2" is removed from a task name before the lookup
        "lookup": {"remove": [".v2"], "prefix_fallback": {}},
    },
    "gritlm": {
        "repo": "https://github.com/ContextualAI/gritlm",
        "path": "evaluation/eval_mteb.py",
        "name": "SET_TO_TASK_TO_DS_TO_PROMPT",
        "set": "e5",
        "license": "Apache-2.0",
        # evaluation/eval_mteb.py: every CQADupstack* task uses the CQADupstackRetrieval instruction
        "lookup": {"remove": [], "prefix_fallback": {"CQADupstack": "CQADupstackRetrieval"}},
    },
    "llm2vec": {
        "repo": "https://github.com/McGill-NLP/llm2vec",
        "path": "test_configs/mteb/task_to_instructions.json",
        "name": "task_to_instructions",
        "license": "MIT",
        "json": True,
        # the file names the twelve CQADupstack forums (one instruction for all); mteb's aggregate
        # CQADupstackRetrieval runs them, so it takes theirs
        "lookup": {"remove": [], "prefix_fallback": {"CQADupstackRetrieval": "CQADupstackTexRetrieval"}},
    },
}


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=checkout, capture_output=True, text=True, check=True).stdout


def _literal(source: str, name: str) -> object:
    """The value of the module-level assignment ``name = <literal>`` in ``source``."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"no assignment to {name} found")


def _flatten(by_type: dict) -> dict:
    flat: dict = {}
    for tasks in by_type.values():
        for task, instruction in tasks.items():
            if task in flat and flat[task] != instruction:
                raise SystemExit(f"task {task} has two different instructions")
            flat[task] = instruction
    return flat


def _documents_bare(instructions: dict) -> dict:
    """Retrieval and reranking tasks' instructions as ``{query, corpus: ""}`` (mteb's task types)."""
    import mteb

    out: dict = {}
    for task, instruction in instructions.items():
        try:
            kind = mteb.get_task(task).metadata.type
        except Exception:  # a task this mteb does not know: keep the instruction for every text
            kind = None
        out[task] = {"query": instruction, "corpus": ""} if kind in ("Retrieval", "Reranking") else instruction
    return out


def extract(key: str, checkout: Path) -> dict:
    spec = SOURCES[key]
    commit = _git(checkout, "rev-parse", "HEAD").strip()
    text = _git(checkout, "show", f"{commit}:{spec['path']}")
    value = _documents_bare(json.loads(text)) if spec.get("json") else _literal(text, spec["name"])
    if "set" in spec:
        value = _flatten(value[spec["set"]])
    source = {k: spec[k] for k in ("repo", "path", "name", "license")} | {"commit": commit}
    if "set" in spec:
        source["set"] = spec["set"]
    return {
        "source": source,
        "note": "A string applies to every text of the task; a {query, corpus} pair to queries and documents.",
        "lookup": spec["lookup"],
        "instructions": value,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gircse", type=Path, required=True, help="a git checkout of Roytsai27/GIRCSE")
    parser.add_argument("--gritlm", type=Path, required=True, help="a git checkout of ContextualAI/gritlm")
    parser.add_argument("--llm2vec", type=Path, required=True, help="a git checkout of McGill-NLP/llm2vec")
    args = parser.parse_args()
    for key, checkout in (("gircse", args.gircse), ("gritlm", args.gritlm), ("llm2vec", args.llm2vec)):
        data = extract(key, checkout)
        target = OUT / f"instructions_{key}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(target)
        print(f"{target}: {len(data['instructions'])} tasks from {data['source']['repo']}@{data['source']['commit']}")


if __name__ == "__main__":
    main()
