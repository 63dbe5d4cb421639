"""Fixed outputs of the tiny random model, to check that a refactoring changes no number.

Computes, with the code as it is, on the tiny random model of tests/conftest.py (seed 0, float32,
one thread): ``encode`` embeddings for every method (GIRCSE with K=1 and K=3, with and without an
instruction, query and document side; ``mean``, ``last``, ``grit``), the training forward's
embeddings, the KV-keeping index path (embeddings and some KV values), the search scores of a small
built index, generative rerank scores (yes/no and query likelihood) and their prompts' token ids,
and the per-step losses and gradient norms of 3 training steps of ``configs/tiny-gircse.yaml`` and
``configs/tiny-grit.yaml``. ``tests/test_golden.py`` recomputes them
and compares with what this script stored:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tests/golden/make_golden.py

writes ``tests/assets/golden/golden.npz`` (float arrays and int arrays only: loads with
``allow_pickle=False``). Rerun it only when a change is meant to alter these numbers.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("GENEMBED_DTYPE", "float32")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "assets" / "golden" / "golden.npz"

TEXTS = ["Paris is the capital of France.", "A man is playing a guitar on the stage.", "ok", ""]
INSTRUCTION = "Retrieve semantically similar text."
DOCS = [
    {"id": "france", "title": "France", "text": "What is the capital of France? Paris is the capital of France."},
    {"id": "fox", "title": "Animals", "text": "The quick brown fox jumps over the lazy dog. The dog sleeps."},
    {"id": "guitar", "title": "", "text": "A man is playing a guitar on the stage. I love this movie, it is moving."},
]


def _tiny_model():
    from genembed.backbone import tiny_backbone
    from genembed.model import GenerativeEmbedder

    return GenerativeEmbedder(tiny_backbone(seed=0))


def _encode_outputs(model) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    t = TEXTS
    for k in (1, 3):
        out[f"encode/gircse/k{k}/none"] = model.encode(t, steps=k, instruction="")
        out[f"encode/gircse/k{k}/instruction"] = model.encode(t, steps=k, instruction=INSTRUCTION)
        out[f"encode/gircse/k{k}/query"] = model.encode_query(t, steps=k)
        out[f"encode/gircse/k{k}/document"] = model.encode_document(t, steps=k)
    out["encode/gircse/k3/plain"] = model.encode(t, steps=3, prompt_format="plain", instruction=INSTRUCTION)
    out["encode/gircse/k3/bidirectional"] = model.encode(t, steps=3, attention="bidirectional")
    out["encode/gircse/k3/all_steps"] = model.encode(t, steps=3, return_all_steps=True, normalize=False)
    auto, used = model.encode(t, steps="auto", max_steps=6, stop_tol=0.9, return_steps_used=True)
    out["encode/gircse/auto"], out["encode/gircse/auto_used"] = auto, np.asarray(used, dtype=np.int64)
    out["encode/gircse/k3/center"] = model.encode(t[:3], steps=3, instruction=INSTRUCTION, center=True)
    for method in ("mean", "last", "grit"):
        out[f"encode/{method}/none"] = model.encode(t, method=method, instruction="")
        out[f"encode/{method}/instruction"] = model.encode(t, method=method, instruction=INSTRUCTION)
        out[f"encode/{method}/query"] = model.encode_query(t, method=method)
        out[f"encode/{method}/document"] = model.encode_document(t, method=method, normalize=False)
    out["encode/mean/bidirectional"] = model.encode(t, method="mean", attention="bidirectional")
    out["encode/last/chat"] = model.encode(t, method="last", prompt_format="chat", instruction=INSTRUCTION)
    return out


def _training_forward_outputs(model) -> dict[str, np.ndarray]:
    from genembed.encoders.settings import EmbedSettings
    from genembed.training.forward import embed_batch, tokenize_texts

    out: dict[str, np.ndarray] = {}
    tokenizer = model.backbone.tokenizer
    instructions = [INSTRUCTION, "", INSTRUCTION, ""]
    for method, prompt_format in (("gircse", "chat"), ("grit", "plain"), ("mean", "plain"), ("last", "plain")):
        batch = tokenize_texts(tokenizer, TEXTS, instructions, prompt_format=prompt_format, max_length=40)
        for cache in (True, False) if method == "gircse" else (True,):
            settings = EmbedSettings(method=method, steps=3, use_cache=cache)
            with torch.no_grad():
                z = embed_batch(model.backbone.model, batch, settings)
            out[f"forward/{method}" + ("" if cache else "/recompute")] = z.numpy()
    return out


def _embed_kv_outputs(model) -> dict[str, np.ndarray]:
    from genembed.encoders.settings import EmbedSettings, IndexEmbedSettings
    from genembed.retrieval.kv_embed import encode_with_kv

    out: dict[str, np.ndarray] = {}
    texts = TEXTS[:3]
    for method, kwargs in (("gircse", {"steps": 3}), ("mean", {}), ("grit", {}), ("last", {})):
        for kind in ("query", "doc"):
            config = EmbedSettings(method=method, **kwargs)
            encoded = encode_with_kv(model.backbone, texts, config, kind=kind, batch_size=2)
            key = f"embed_kv/{method}/{kind}"
            out[key] = encoded.embeddings
            out[key + "/ids"] = np.asarray(encoded.ids[0], dtype=np.int64)
            keys, values = encoded.kv[0]
            out[key + "/keys"] = keys[:, :, :4, :4].float().numpy()
            out[key + "/values"] = values[:, :, -4:, :4].float().numpy()
    centred = IndexEmbedSettings(embed=EmbedSettings(steps=2), center=True)
    centered = encode_with_kv(model.backbone, texts, centred, kind="query", keep_kv=False)
    out["embed_kv/gircse/center"] = centered.embeddings
    return out


def _rerank_outputs(model) -> dict[str, np.ndarray]:
    from genembed.generation.query_likelihood import query_likelihood_prompt
    from genembed.generation.rerank import rerank_prompt

    out: dict[str, np.ndarray] = {}
    documents = [d["text"] for d in DOCS] + ["ok", "The dog sleeps."]
    query = "capital of France"
    for scoring in ("yes_no", "query_likelihood"):
        for name, instruction in (("default", None), ("instruction", INSTRUCTION)):
            results = model.rerank(
                "capital of France", documents, scoring=scoring, instruction=instruction, batch_size=2
            )
            key = f"rerank/{scoring}/{name}"
            out[key + "/order"] = np.asarray([r.index for r in results], dtype=np.int64)
            out[key + "/scores"] = np.asarray([r.score for r in results], dtype=np.float64)
            out[key + "/probabilities"] = np.asarray([r.probability for r in results], dtype=np.float64)
    tokenizer = model.backbone.tokenizer
    prompt = rerank_prompt(tokenizer, query, INSTRUCTION)
    before, after = query_likelihood_prompt(tokenizer, INSTRUCTION)
    for key, ids in (("yes_no/prefix", prompt.prefix), ("yes_no/suffix", prompt.suffix)):
        out[f"rerank/{key}"] = np.asarray(ids, dtype=np.int64)
    for key, ids in (("query_likelihood/before", before), ("query_likelihood/after", after)):
        out[f"rerank/{key}"] = np.asarray(ids, dtype=np.int64)
    return out


def _index_outputs(model, folder: Path) -> dict[str, np.ndarray]:
    import json

    from genembed.retrieval.index_build import build_index

    source = folder / "docs.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in DOCS), "utf-8")
    index = build_index(model, [source], folder / "idx", chunk_tokens=12, overlap=3, show_progress_bar=False)
    queries = index.encode_queries(model, ["capital of France", "guitar on stage"])
    scores, ids = index.search(queries, k=4)
    return {"index/queries": queries, "index/scores": scores, "index/ids": np.asarray(ids, dtype=np.int64)}


def _training_outputs(folder: Path) -> dict[str, np.ndarray]:
    import json

    from genembed.training import train

    out: dict[str, np.ndarray] = {}
    for name in ("tiny-gircse", "tiny-grit"):
        run = folder / name
        overrides = ["train.max_steps=3", f"train.output_dir={run}", "train.progress=false", "train.save_every=0"]
        train(str(ROOT / "configs" / f"{name}.yaml"), overrides)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        for field in ("loss", "rep", "reg", "gen", "grad_norm"):
            out[f"train/{name}/{field}"] = np.asarray([r[field] for r in records], dtype=np.float64)
    return out


def compute_golden() -> dict[str, np.ndarray]:
    """Every fixed output, by name."""
    torch.set_num_threads(1)
    model = _tiny_model()
    out = _encode_outputs(model) | _training_forward_outputs(model) | _embed_kv_outputs(model)
    out |= _rerank_outputs(model)
    with tempfile.TemporaryDirectory() as tmp:
        out |= _index_outputs(model, Path(tmp))
        out |= _training_outputs(Path(tmp))
    return {k: np.asarray(v) for k, v in out.items()}


def main() -> None:
    golden = compute_golden()
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    partial = GOLDEN.with_suffix(".partial.npz")
    np.savez(partial, **golden)
    partial.replace(GOLDEN)
    print(f"wrote {len(golden)} arrays to {GOLDEN.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
