from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from genembed.encoders import EmbedSettings, RunOptions, encode_texts
from genembed.encoders import corpus as corpus_mod
from genembed.encoders.corpus import encode_corpus, load_corpus_embeddings, read_records

ACCELERATE = Path(sys.executable).with_name("accelerate")
WORDS = [
    "fox",
    "dog",
    "guitar",
    "stage",
    "question",
    "passage",
    "emotion",
    "movie",
    "product",
    "capital",
    "France",
    "Paris",
]


def _write_corpus(path: Path, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + i % 9))
        row = {"id": f"doc-{i}", "text": text}
        if i % 4 == 0:
            row["title"] = f"Title {i}"
        rows.append(row)
    lines = [json.dumps(r) for r in rows]
    lines.insert(3, "")  # blank lines are skipped, not counted as records
    path.write_text("\n".join(lines) + "\n")
    return rows


def _texts(rows: list[dict]) -> list[str]:
    return [f"{r['title']} {r['text']}" if r.get("title") else r["text"] for r in rows]


OPTIONS = EmbedSettings.build(method="gircse", steps=2)
RUN = RunOptions(batch_size=4)  # changes no embedding


def test_shards_hold_the_normalized_embeddings_and_ids_in_input_order(tiny, tmp_path):
    rows = _write_corpus(tmp_path / "c.jsonl", 23)
    out = tmp_path / "out"
    result = encode_corpus(tiny, tmp_path / "c.jsonl", out, OPTIONS, run=RUN, shard_size=5, show_progress_bar=False)
    assert (result.records, result.shards, result.encoded_shards) == (23, 5, [0, 1, 2, 3, 4])
    assert [np.load(tmp_path / "out" / f"shard-{s:06d}.npy").shape for s in range(5)] == [(5, 32)] * 4 + [(3, 32)]
    ids, emb = load_corpus_embeddings(tmp_path / "out")
    assert ids == [r["id"] for r in rows]
    expected, _ = encode_texts(tiny, _texts(rows), OPTIONS)
    np.testing.assert_allclose(emb, torch.nn.functional.normalize(expected, dim=-1).numpy(), atol=1e-5)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["records"] == 23 and manifest["dim"] == 32 and len(manifest["shards"]) == 5


def test_resumes_after_an_interruption_without_redoing_finished_shards(tiny, tmp_path, monkeypatch):
    _write_corpus(tmp_path / "c.jsonl", 17)
    calls = []

    def crashing(backbone, texts, *args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the user pressed Ctrl-C while the third shard was encoding
        calls.append(len(texts))
        return encode_texts(backbone, texts, *args, **kwargs)

    monkeypatch.setattr(corpus_mod, "encode_texts", crashing)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(tiny, tmp_path / "c.jsonl", tmp_path / "out", OPTIONS, shard_size=4, show_progress_bar=False)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("shard-*.npy")) == ["shard-000000.npy", "shard-000001.npy"]
    assert not (out / "manifest.json").exists() and not list(out.glob(".*tmp*"))
    first_mtime = (out / "shard-000000.npy").stat().st_mtime_ns

    calls.clear()
    monkeypatch.setattr(
        corpus_mod, "encode_texts", lambda b, t, *a, **k: calls.append(len(t)) or encode_texts(b, t, *a, **k)
    )
    result = encode_corpus(tiny, tmp_path / "c.jsonl", out, OPTIONS, shard_size=4, show_progress_bar=False)
    assert (result.skipped_shards, result.encoded_shards, calls) == ([0, 1], [2, 3, 4], [4, 4, 1])
    assert (out / "shard-000000.npy").stat().st_mtime_ns == first_mtime

    monkeypatch.undo()
    fresh = encode_corpus(
        tiny, tmp_path / "c.jsonl", tmp_path / "fresh", OPTIONS, shard_size=4, show_progress_bar=False
    )
    assert fresh.encoded_shards == [0, 1, 2, 3, 4]
    (ids_a, a), (ids_b, b) = load_corpus_embeddings(out), load_corpus_embeddings(tmp_path / "fresh")
    assert ids_a == ids_b and np.array_equal(a, b)


def test_other_settings_are_refused_unless_overwrite(tiny, tmp_path):
    _write_corpus(tmp_path / "c.jsonl", 6)
    encode_corpus(tiny, tmp_path / "c.jsonl", tmp_path / "out", OPTIONS, shard_size=4, show_progress_bar=False)
    other = EmbedSettings.build(method="gircse", steps=3)
    with pytest.raises(ValueError, match="steps differ"):
        encode_corpus(tiny, tmp_path / "c.jsonl", tmp_path / "out", other, shard_size=4, show_progress_bar=False)
    redone = encode_corpus(
        tiny, tmp_path / "c.jsonl", tmp_path / "out", other, shard_size=4, overwrite=True, show_progress_bar=False
    )
    assert redone.encoded_shards == [0, 1]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["steps"] == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": 1, "txt": "typo"}', r"c\.jsonl:3: missing field 'text'"),
        ('{"id": 1, "text": 5}', r"c\.jsonl:3: field 'text' must be a string, got int"),
        ('{"id": [1], "text": "x"}', r"c\.jsonl:3: field 'id' must be a string or an integer"),
        ("{not json", r"c\.jsonl:3: not valid JSON"),
        ("[1, 2]", r"c\.jsonl:3: each line must be a JSON object or string, got list"),
    ],
)
def test_a_bad_record_names_file_line_and_field(tiny, tmp_path, line, message):
    (tmp_path / "c.jsonl").write_text('{"text": "fine"}\n"a bare string is a text"\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        encode_corpus(tiny, tmp_path / "c.jsonl", tmp_path / "out", OPTIONS, show_progress_bar=False)


def test_input_is_streamed_one_shard_at_a_time(tiny, tmp_path, monkeypatch):
    _write_corpus(tmp_path / "c.jsonl", 30)
    with open(tmp_path / "c.jsonl", "a") as f:
        f.write("{broken\n")
    records = read_records(tmp_path / "c.jsonl")
    assert next(records)[1:] == ("doc-0", "Title 0 fox")  # lazily parsed: the broken last line is not read yet
    sizes = []
    monkeypatch.setattr(
        corpus_mod, "encode_texts", lambda b, t, *a, **k: sizes.append(len(t)) or encode_texts(b, t, *a, **k)
    )
    with pytest.raises(ValueError, match=r"c\.jsonl:32: not valid JSON"):
        encode_corpus(tiny, tmp_path / "c.jsonl", tmp_path / "out", OPTIONS, shard_size=8, show_progress_bar=False)
    assert sizes == [8, 8, 8]  # three shards were encoded and written before the bad line was parsed
    assert len(list((tmp_path / "out").glob("shard-*.npy"))) == 3


def test_each_rank_encodes_its_own_shards(tiny, tmp_path, monkeypatch):
    _write_corpus(tmp_path / "c.jsonl", 11)
    monkeypatch.setattr(corpus_mod, "barrier", lambda: None)
    done = {}
    for rank in (1, 0):  # rank 0 last: it writes the manifest once every shard exists
        monkeypatch.setattr(corpus_mod, "process_group", lambda rank=rank: contextlib.nullcontext((rank, 2)))
        result = encode_corpus(
            tiny, tmp_path / "c.jsonl", tmp_path / "out", OPTIONS, shard_size=3, show_progress_bar=False
        )
        done[rank] = result.encoded_shards
    assert done == {0: [0, 2], 1: [1, 3]}
    monkeypatch.undo()
    single = encode_corpus(tiny, tmp_path / "c.jsonl", tmp_path / "one", OPTIONS, shard_size=3, show_progress_bar=False)
    assert single.encoded_shards == [0, 1, 2, 3]
    (ids_a, a), (ids_b, b) = load_corpus_embeddings(tmp_path / "out"), load_corpus_embeddings(tmp_path / "one")
    assert ids_a == ids_b and np.array_equal(a, b)


def test_an_unfinished_folder_cannot_be_loaded(tmp_path):
    with pytest.raises(FileNotFoundError, match="has not finished"):
        load_corpus_embeddings(tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "genembed.cli.app", "encode", *args]


@pytest.mark.integration
def test_cli_two_processes_under_accelerate_equal_one_process(tiny_folder, tmp_path):
    rows = _write_corpus(tmp_path / "c.jsonl", 26)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    common = ["--model", str(tiny_folder), "--steps", "2", "--shard-size", "4", "--instruction", "Find it."]
    launch = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port())]
    two = subprocess.run(
        [
            *launch,
            "-m",
            "genembed.cli.app",
            "encode",
            str(tmp_path / "c.jsonl"),
            "--out",
            str(tmp_path / "two"),
            *common,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "26 records in 7 shards" in two.stdout and "2 processes" in two.stdout
    # rank 0 shows a progress bar over its own shards (0, 2, 4, 6: 14 records) with elapsed<remaining time
    assert re.search(r"14/14 \[\d\d:\d\d<\d\d:\d\d", two.stderr), two.stderr[-2000:]
    one = subprocess.run(
        _cli(str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "one"), *common, "--quiet"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    (ids_two, two_emb), (ids_one, one_emb) = (
        load_corpus_embeddings(tmp_path / "two"),
        load_corpus_embeddings(tmp_path / "one"),
    )
    assert ids_two == ids_one == [r["id"] for r in rows]
    np.testing.assert_allclose(two_emb, one_emb, atol=1e-6)
    assert np.allclose(np.linalg.norm(one_emb, axis=1), 1.0, atol=1e-5)

    bad = subprocess.run(
        _cli(str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "one"), *common[:-2], "--quiet"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "instruction differ" in bad.stderr


@pytest.fixture(scope="module")
def encoded(tmp_path_factory, _tiny_backbone):
    """A finished output folder of 11 records in 3 shards."""
    folder = tmp_path_factory.mktemp("encoded")
    _write_corpus(folder / "c.jsonl", 11)
    encode_corpus(_tiny_backbone, folder / "c.jsonl", folder / "out", OPTIONS, shard_size=4, show_progress_bar=False)
    return folder


def _damage(path: Path, how: str) -> None:
    if how == "truncate":
        path.write_bytes(path.read_bytes()[:-7])
    elif how == "flip":
        data = bytearray(path.read_bytes())
        data[-3] ^= 0x01  # one bit of one float: only the checksum sees it
        path.write_bytes(bytes(data))
    else:
        path.unlink()


@pytest.mark.parametrize(
    ("file", "how", "match"),
    [
        ("shard-000001.npy", "truncate", "has .* bytes, .* were written"),
        ("shard-000001.npy", "flip", "does not match its checksum"),
        ("shard-000001.npy", "delete", "is missing"),
        ("shard-000001.ids.json", "truncate", "has .* bytes"),
        ("manifest.json", "truncate", "is not valid JSON"),
    ],
)
def test_a_damaged_file_names_itself_and_the_rerun_repairs_it(tiny, encoded, tmp_path, file, how, match):
    import shutil

    from genembed._files import DamagedFileError

    shutil.copytree(encoded, tmp_path / "copy")
    out = tmp_path / "copy" / "out"
    expected_ids, expected = load_corpus_embeddings(encoded / "out")
    _damage(out / file, how)
    with pytest.raises(DamagedFileError, match=match) as caught:
        load_corpus_embeddings(out)
    message = str(caught.value)
    assert str(out / file) in message and "rerun the same `genembed encode` command" in message
    # do what the message says: delete the shard's files (or the manifest) and rerun
    for name in [file, file.replace(".ids.json", ".npy"), file.replace(".npy", ".ids.json")]:
        (out / name).unlink(missing_ok=True)
    result = encode_corpus(tiny, tmp_path / "copy" / "c.jsonl", out, OPTIONS, shard_size=4, show_progress_bar=False)
    assert result.encoded_shards == ([] if file == "manifest.json" else [1])
    ids, emb = load_corpus_embeddings(out)
    assert ids == expected_ids and np.array_equal(emb, expected)


def test_a_damaged_shard_from_an_earlier_run_is_named_when_resuming(tiny, encoded, tmp_path):
    import shutil

    from genembed._files import DamagedFileError

    shutil.copytree(encoded, tmp_path / "copy")
    out = tmp_path / "copy" / "out"
    (out / "manifest.json").unlink()
    _damage(out / "shard-000002.npy", "truncate")
    with pytest.raises(DamagedFileError, match=r"shard-000002\.npy is not a readable \.npy array") as caught:
        encode_corpus(tiny, tmp_path / "copy" / "c.jsonl", out, OPTIONS, shard_size=4, show_progress_bar=False)
    assert "Delete shard-000002.npy and shard-000002.ids.json" in str(caught.value)
    # an old manifest without checksums still loads (size and shape are checked by numpy)
    shutil.copytree(encoded, tmp_path / "old")
    manifest = json.loads((tmp_path / "old" / "out" / "manifest.json").read_text())
    for shard in manifest["shards"]:
        del shard["embeddings_file"], shard["ids_file"]
    (tmp_path / "old" / "out" / "manifest.json").write_text(json.dumps(manifest))
    assert load_corpus_embeddings(tmp_path / "old" / "out")[1].shape == (11, 32)
