"""One short check of the CUDA paths on tiny random models: encode, a training run, the server.

For a GPU machine (run it there; on a machine without CUDA it says so and exits 2). Each part compares
the GPU against the CPU on the same weights, so a wrong device path shows as a number, not a crash:

- **encode**: GIRCSE at K=1 and K=5 and GRIT-style mean pooling (bidirectional), float32 on CUDA against
  float32 on the CPU (max |difference| of the unit vectors), bfloat16 on CUDA against float32 (lowest
  cosine), and texts per second of a SmolLM2-sized random model (30 layers, hidden 576) at K=5.
- **train**: 30 ICR steps of the tiny config the tests use (``tests/assets/training/similar.jsonl``) on
  CUDA and on the CPU from the same seed: the device the run used, the loss before and after, and how far
  the two loss curves drift apart.
- **serve**: ``/v1/embeddings`` of the FastAPI app over a model on CUDA against ``model.encode``, and
  ``/v1/chat/completions`` answering.

    python benchmarks/cuda_check.py --out benchmarks/results/cuda_check_h200.json

About a minute on an H200 (47 s, the last run); the result's packages were the GPU image's (torch 2.11,
transformers 5.17), with fastapi and pydantic carried as wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _run_info import REPO, git_commit

sys.path.insert(0, str(REPO / "tests" / "training"))  # the tests' tiny training config

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "I loved this film; the acting was superb.",
    "How do I reset my card PIN?",
    "Stock markets fell sharply on Monday.",
    "A protein that binds to DNA regulates transcription.",
    "What is the boiling point of water at sea level?",
    "The service at this restaurant was awful.",
]
INSTRUCTION = "Retrieve semantically similar text."


def _sync() -> None:
    torch.cuda.synchronize()


def check_encode(folder: Path) -> dict:
    import genembed

    cpu = genembed.load(folder, dtype="float32", device="cpu")
    gpu = genembed.load(folder, dtype="float32", device="cuda")
    half = genembed.load(folder, dtype="bfloat16", device="cuda")
    out: dict = {"device": str(next(gpu.backbone.model.parameters()).device)}
    for name, options in {
        "gircse K=1": {"steps": 1},
        "gircse K=5": {"steps": 5},
        "grit mean bidirectional": {"method": "grit", "attention": "bidirectional"},
    }.items():
        ref = cpu.encode(TEXTS, instruction=INSTRUCTION, **options)
        got = gpu.encode(TEXTS, instruction=INSTRUCTION, **options)
        low = half.encode(TEXTS, instruction=INSTRUCTION, **options)
        out[name] = {
            "fp32 cuda vs cpu max abs diff": float(np.abs(got - ref).max()),
            "bf16 cuda vs fp32 cpu min cosine": float((low * ref).sum(1).min()),
        }
    return out


def throughput() -> dict:
    """Texts per second of a SmolLM2-sized random model on CUDA (bf16 and fp32), K=5, 512 texts."""
    from genembed.backbone import tiny_backbone
    from genembed.model import GenerativeEmbedder

    texts = [f"{TEXTS[i % len(TEXTS)]} Sample number {i} of the throughput run." for i in range(512)]
    result: dict = {"model": "random Llama, 30 layers, hidden 576, 4 heads (SmolLM2-sized), K=5, batch 64"}
    backbone = tiny_backbone(seed=1, hidden_size=576, num_layers=30)
    for dtype in (torch.float32, torch.bfloat16):
        backbone.model.to(device="cuda", dtype=dtype)
        model = GenerativeEmbedder(backbone)
        model.encode(texts[:64], steps=5, batch_size=64)  # warm-up
        seconds = []
        for _ in range(3):  # the best of three passes
            _sync()
            start = time.perf_counter()
            model.encode(texts, steps=5, batch_size=64)
            _sync()
            seconds.append(time.perf_counter() - start)
        result[f"{dtype} texts/s"] = round(len(texts) / min(seconds), 1)
    return result


def _train_config(folder: Path, output: Path):
    from conftest import tiny_run_config

    return tiny_run_config(output, folder, train={"max_steps": 30, "warmup_steps": 3})


def check_train(folder: Path, work: Path) -> dict:
    from genembed.training import train

    runs = {}
    for device in ("cuda", "cpu"):
        start = time.perf_counter()
        if device == "cuda":
            result = train(_train_config(folder, work / "run-cuda"))
            ran_on = str(next(result.model.parameters()).device)
        else:  # the same run in a process that sees no GPU (training picks CUDA whenever there is one)
            command = [sys.executable, __file__, "--train-cpu", str(folder), str(work / "run-cpu")]
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
            ran_on = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout.strip()
        seconds = time.perf_counter() - start
        records = [json.loads(line) for line in (work / f"run-{device}" / "metrics.jsonl").read_text().splitlines()]
        runs[device] = {
            "ran on": ran_on.splitlines()[-1] if ran_on else "",
            "loss first, last": [records[0]["loss"], records[-1]["loss"]],
            "seconds": round(seconds, 1),
            "losses": [r["loss"] for r in records],
        }
    drift = np.abs(np.array(runs["cuda"].pop("losses")) - np.array(runs["cpu"].pop("losses")))
    runs["max |loss cuda - loss cpu| over 30 steps"] = float(drift.max())
    return runs


def check_serve(folder: Path) -> dict:
    from fastapi.testclient import TestClient

    import genembed
    from genembed.serve import ServeSettings, create_app

    model = genembed.load(folder, dtype="float32", device="cuda")
    reference = genembed.load(folder, dtype="float32", device="cuda")
    with TestClient(create_app(model, ServeSettings())) as client:
        response = client.post("/v1/embeddings", json={"input": TEXTS, "instruction": INSTRUCTION, "steps": 5})
        response.raise_for_status()
        got = np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)
        chat = client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
        )
        chat.raise_for_status()
    want = reference.encode(TEXTS, instruction=INSTRUCTION, steps=5)
    return {
        "embeddings status": response.status_code,
        "served vs encode max abs diff": float(np.abs(got - want).max()),
        "chat status": chat.status_code,
        "chat finish_reason": chat.json()["choices"][0]["finish_reason"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--train-cpu", nargs=2, type=Path, help=argparse.SUPPRESS)  # check_train's CPU run
    args = parser.parse_args()
    if args.train_cpu:
        from genembed.training import train

        print(next(train(_train_config(*args.train_cpu)).model.parameters()).device)
        return 0
    if args.out is None:
        parser.error("--out is required")
    if not torch.cuda.is_available():
        print("no CUDA device: this check runs on a GPU machine", file=sys.stderr)
        return 2
    from genembed.backbone import tiny_backbone

    report: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "git_commit": git_commit()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        backbone = tiny_backbone(seed=0)
        backbone.model.save_pretrained(work / "tiny")
        backbone.tokenizer.save_pretrained(work / "tiny")
        for name, part in (
            ("encode", lambda: check_encode(work / "tiny")),
            ("train", lambda: check_train(work / "tiny", work)),
            ("serve", lambda: check_serve(work / "tiny")),
            ("throughput", throughput),
        ):
            start = time.perf_counter()
            try:
                report[name] = part()
            except Exception as error:  # report every part, even after one fails
                report[name] = {"error": f"{type(error).__name__}: {error}"}
            report[name]["check seconds"] = round(time.perf_counter() - start, 1)
            print(name, json.dumps(report[name], indent=1), flush=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
