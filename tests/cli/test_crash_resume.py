"""SIGKILL ``genembed train``, ``encode`` and ``index build``/``add`` at several points; the rerun must
give exactly what an uninterrupted run gives: the same loss sequence, the same bytes of every shard,
vector file, chunk list and KV file.

Kill points are chosen by watching the files a run writes (metrics lines, checkpoints, shards), so
where exactly the signal lands varies from run to run, as in a real crash. The uninterrupted
references run in this process through the same CLI commands.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from genembed.cli.app import app

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tiny-gircse.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
WORDS = ["fox", "dog", "guitar", "stage", "question", "passage", "emotion", "movie", "product", "France", "Paris"]


def _reference(*args: object) -> None:
    """Run ``genembed args`` in this process, uninterrupted."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output


def _command(*args: object) -> list[str]:
    return [sys.executable, "-m", "genembed.cli.app", *(str(a) for a in args)]


def _finish(*args: object) -> None:
    done = subprocess.run(_command(*args), env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _kill_when(ready: Callable[[], bool], *args: object) -> None:
    """Start ``genembed args`` and SIGKILL it as soon as ``ready()`` holds (it must not end before)."""
    with tempfile.TemporaryFile() as log:  # not a pipe: a full pipe would stall the run
        proc = subprocess.Popen(_command(*args), env=ENV, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 300
        try:
            while not ready():
                if proc.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"`genembed {args[0]}` ended before the kill point:\n{log.read()[-3000:]!r}")
                if time.monotonic() > deadline:
                    pytest.fail("the kill point was not reached in 300 s")
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path (hidden ones included: no temp file may be left)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_train_killed_three_times_repeats_the_uninterrupted_losses(tmp_path):
    # the example tiny config (model "tiny": built in memory), with LoRA dropout on so that the RNG
    # states must be restored too
    settings = ["train.max_steps=10", "train.save_every=3", "train.progress=false", "lora.dropout=0.1"]
    _reference("train", CONFIG, *settings, f"train.output_dir={tmp_path / 'ref'}")

    run = tmp_path / "run"
    args = ("train", CONFIG, *settings, f"train.output_dir={run}")
    metrics, checkpoints = run / "metrics.jsonl", run / "checkpoints"
    _kill_when(lambda: _lines(metrics) >= 2, *args)  # before the first checkpoint
    assert not list(checkpoints.glob("step-*"))
    _kill_when(lambda: (checkpoints / "step-0000003" / "state.json").is_file(), *args, "--resume")  # at one
    _kill_when(lambda: _lines(metrics) >= 8, *args, "--resume")  # between two: steps 7 and 8 are redone
    _finish(*args, "--resume")

    def records(folder: Path) -> list[dict]:
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in lines]

    expected = records(tmp_path / "ref")
    assert [r["step"] for r in expected] == list(range(1, 11))
    assert records(run) == expected  # loss, its terms, lr, grad norm and batch sources, exactly
    assert (run / "adapter_model.safetensors").read_bytes() == (
        tmp_path / "ref" / "adapter_model.safetensors"
    ).read_bytes()
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-0000009", "step-0000010"]
    assert not [p for p in run.rglob(".*")], "temp files were left behind"


def _write_corpus(path: Path, n: int) -> None:
    rows = [
        {"id": f"doc-{i}", "text": " ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(2 + i % 7))}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_encode_killed_between_shards_gives_the_same_bytes(tmp_path, tiny_folder):
    _write_corpus(tmp_path / "c.jsonl", 36)
    common = ("--model", tiny_folder, "--steps", "2", "--shard-size", "3", "--batch-size", "2", "--quiet")
    _reference("encode", tmp_path / "c.jsonl", "--out", tmp_path / "ref", *common)

    out = tmp_path / "out"
    args = ("encode", tmp_path / "c.jsonl", "--out", out, *common)
    _kill_when(lambda: len(list(out.glob("shard-*.npy"))) >= 2, *args)
    _kill_when(lambda: len(list(out.glob("shard-*.npy"))) >= 7, *args)
    _finish(*args)
    expected = _files(tmp_path / "ref")
    assert len([name for name in expected if name.endswith(".npy")]) == 12
    assert _files(out) == expected  # shards, ids, config and manifest (sizes and checksums) byte for byte


def _write_docs(path: Path, first: int, n: int) -> Path:
    rows = []
    for i in range(first, first + n):
        words = [WORDS[(i * 3 + j) % len(WORDS)] for j in range(12 + i % 9)]
        rows.append({"id": f"d{i}", "title": f"Doc {i}", "text": " ".join(words) + "."})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _kv_file(data: bytes) -> tuple[dict, bytes]:
    """A safetensors file as (parsed header, tensor bytes): the writer orders the header's metadata
    differently from one process to the next (a hash map), the tensors it keeps in a fixed order."""
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + size]), data[8 + size :]


def test_index_build_and_add_killed_mid_way_give_the_same_index(tmp_path, tiny_folder):
    docs, more = _write_docs(tmp_path / "docs.jsonl", 0, 8), _write_docs(tmp_path / "more.jsonl", 8, 6)
    common = ("--model", tiny_folder, "--shard-size", "2", "--batch-size", "2")
    build = ("--steps", "2", "--chunk-tokens", "12", "--overlap", "3", "--store-kv", "--kv-dtype", "float32", *common)
    ref = tmp_path / "ref"
    _reference("index", "build", docs, "--out", ref, *build)
    _reference("index", "add", ref, more, *common)

    out = tmp_path / "idx"
    pending = out / ".build"
    _kill_when(lambda: len(list(pending.glob("emb-*.npy"))) >= 3, "index", "build", docs, "--out", out, *build)
    assert not (out / "manifest.json").exists()
    _finish("index", "build", docs, "--out", out, *build)
    _kill_when(lambda: len(list(pending.glob("emb-*.npy"))) >= 2, "index", "add", out, more, *common)
    assert json.loads((out / "manifest.json").read_text())["generation"] == 1  # the add was not committed
    _finish("index", "add", out, more, *common)

    expected, got = _files(ref), _files(out)
    assert sorted(got) == sorted(expected)  # no .build/ or temp file left
    assert len([name for name in expected if name.startswith("kv/")]) > 8
    for name in expected:
        if name.startswith("kv/"):
            assert _kv_file(got[name]) == _kv_file(expected[name]), name
        elif name != "manifest.json":  # faiss vectors and chunk records (ids), byte for byte
            assert got[name] == expected[name], name
    manifests = [json.loads(files["manifest.json"]) for files in (expected, got)]
    for manifest in manifests:
        del manifest["created"], manifest["updated"]
    assert manifests[0] == manifests[1]
