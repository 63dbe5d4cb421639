"""Cached teacher targets: the distinct texts of the training files, stored by text, resumable, checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from genembed.training import ConfigError
from genembed.training.data import DataError
from genembed.training.data.single import read_single_texts
from genembed.training.teacher_targets import (
    MissingTargetsError,
    TargetStore,
    build_targets,
    targets_folder,
    training_texts,
)


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    pairs = _write(
        tmp_path / "pairs.jsonl",
        [
            {"query": "q one", "pos": ["doc a"], "neg": ["doc b"], "instruction": "Find it"},
            {"query": "q two", "pos": ["doc a", "doc c"]},  # "doc a" again: stored once
        ],
    )
    texts = _write(tmp_path / "texts.jsonl", [{"text": "q one"}, {"text": "free text"}])
    return [pairs, texts]


def test_training_texts_are_the_distinct_texts_without_instructions(files):
    assert training_texts(files, "all-mpnet-base-v2") == ["q one", "doc a", "doc b", "q two", "doc c", "free text"]


def test_a_texts_file_with_another_field_is_refused(tmp_path):
    bad = _write(tmp_path / "bad.jsonl", [{"text": "a"}, {"text": "b", "label": "x"}])
    with pytest.raises(DataError, match=r"bad.jsonl:2: a texts file has one field 'text' per line, got 'label'"):
        read_single_texts(bad)


class CountingEncoder:
    """A deterministic fake teacher: a text's vector is seeded by its characters; counts what it embeds."""

    def __init__(self, dim: int = 6):
        self.dim, self.seen = dim, []

    def vector(self, text: str) -> np.ndarray:
        return np.random.default_rng([ord(c) for c in text]).normal(size=self.dim).astype(np.float32)

    def __call__(self, texts):
        self.seen += texts
        return np.stack([self.vector(t) for t in texts])


def test_targets_are_stored_by_text_normalised_and_resumed(tmp_path, files):
    texts = training_texts(files)
    encoder = CountingEncoder()
    store = build_targets(texts[:4], tmp_path, "fake", encode=encoder, dimension=6, chunk_size=3, progress=False)
    assert sorted(encoder.seen) == sorted(texts[:4]) and len(list(store.folder.glob("chunk-*"))) == 2
    encoder.seen.clear()
    store = build_targets(texts, tmp_path, "fake", encode=encoder, dimension=6, chunk_size=3, progress=False)
    assert sorted(encoder.seen) == sorted(texts[4:])  # only the missing ones are embedded
    got = TargetStore.open(tmp_path, "fake").vectors(["doc c", "q one", "doc c"])
    expected = np.stack([encoder.vector(t) for t in ("doc c", "q one", "doc c")])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert got.dtype == torch.float32 and got.shape == (3, 6)
    np.testing.assert_allclose(got.numpy(), expected, atol=2e-3)  # stored in float16
    with pytest.raises(
        MissingTargetsError, match=r"1 of 2 texts have no cached target of fake .*'unseen'.*--teacher fake"
    ):
        store.vectors(["q one", "unseen"])
    assert [p.name for p in store.folder.iterdir() if p.name.startswith(".")] == []


def test_a_missing_store_or_another_teachers_store_is_a_clear_error(tmp_path):
    with pytest.raises(MissingTargetsError, match=r"no cached targets of teacher t1 .* genembed teacher-targets FILES"):
        TargetStore.open(tmp_path, "t1")
    build_targets(["x"], tmp_path, "t1", encode=CountingEncoder(), dimension=6, progress=False)
    (targets_folder(tmp_path, "t2")).mkdir()
    (targets_folder(tmp_path, "t1") / "store.json").replace(targets_folder(tmp_path, "t2") / "store.json")
    with pytest.raises(MissingTargetsError, match="holds the targets of 't1', not 't2'"):
        TargetStore.open(tmp_path, "t2")


def test_targets_of_a_sentence_transformers_teacher_match_its_encode(tmp_path, tiny_teacher):
    from sentence_transformers import SentenceTransformer

    texts = ["a cat sat.", "tax law", "the dog ran!", "x", "stocks fell 3%"]
    store = build_targets(texts, tmp_path, str(tiny_teacher), progress=False, device="cpu", chunk_size=2)
    assert store.folder == tmp_path / "st" and store.dimension == 32
    model = SentenceTransformer(str(tiny_teacher), device="cpu", local_files_only=True)
    expected = model.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(store.vectors(texts).numpy(), expected, atol=2e-3)


def test_the_cli_counts_and_builds(tmp_path, files, tiny_teacher):
    from typer.testing import CliRunner

    from genembed.cli.app import app

    args = ["teacher-targets", *map(str, files), "--teacher", str(tiny_teacher), "--out", str(tmp_path / "t")]
    result = CliRunner().invoke(app, [*args, "--count"])
    assert result.exit_code == 0 and "6 distinct texts, 6 without a cached target" in result.output
    assert CliRunner().invoke(app, args).exit_code == 0
    result = CliRunner().invoke(app, [*args, "--count"])
    assert "6 distinct texts, 0 without a cached target" in result.output


def test_a_store_keeps_one_max_length(tmp_path, tiny_teacher):
    store = build_targets(["a b c d e f"], tmp_path, str(tiny_teacher), device="cpu", max_length=8, progress=False)
    assert store.max_length == 8
    with pytest.raises(ConfigError, match=r"read at max_length 8, not 128: build with --max-length 8"):
        build_targets(["other"], tmp_path, str(tiny_teacher), device="cpu", progress=False)


def test_a_complete_store_is_returned_without_loading_the_teacher(tmp_path, monkeypatch):
    from genembed.training.teacher_targets import default_root, targets_root

    build_targets(["a", "b"], tmp_path, "fake", encode=CountingEncoder(), dimension=6, progress=False)
    store = build_targets(["b", "a"], tmp_path, "fake", progress=False)  # "fake" is no loadable teacher
    assert len(store.index) == 2
    with pytest.raises(ConfigError, match="fake holds no sentence-transformers model"):
        build_targets(["c"], tmp_path, "fake", progress=False)
    monkeypatch.setenv("GENEMBED_CACHE", str(tmp_path / "cache"))
    assert targets_root("default") == default_root() == tmp_path / "cache" / "teacher-targets"
    assert targets_root("~/t") == Path.home() / "t"
