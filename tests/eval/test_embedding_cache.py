"""The SQLite embedding cache: keys, round trips, and surviving a process killed mid-write."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from genembed._files import DamagedFileError
from genembed.eval.embedding_cache import EmbeddingCache


def test_round_trip_and_key_parts(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    cache.put("enc", "ins", 5, ["a", "b", "c"], vectors)
    hits = cache.get("enc", "ins", 5, ["c", "x", "a", "a"])
    assert sorted(hits) == [0, 2, 3]
    assert np.array_equal(hits[0], vectors[2]) and np.array_equal(hits[3], vectors[0])
    # every part of the key matters: encoder, instruction, view (K)
    assert cache.get("other", "ins", 5, ["a"]) == {}
    assert cache.get("enc", "", 5, ["a"]) == {}
    assert cache.get("enc", "ins", 3, ["a"]) == {}
    assert cache.count() == 3 and cache.count("enc") == 3
    with pytest.raises(ValueError, match="3 texts but 2 vectors"):
        cache.put("enc", "ins", 5, ["a", "b", "c"], vectors[:2])
    cache.close()
    with EmbeddingCache(tmp_path / "c.sqlite") as reopened:  # persists across processes/opens
        assert np.array_equal(reopened.get("enc", "ins", 5, ["b"])[0], vectors[1])


def test_many_texts_beyond_the_parameter_limit(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    texts = [f"text {i}" for i in range(1234)]
    cache.put("e", "", 0, texts, np.random.default_rng(0).normal(size=(1234, 8)))
    assert len(cache.get("e", "", 0, texts)) == 1234


def test_a_process_killed_mid_write_leaves_earlier_rows_intact(tmp_path):
    path = tmp_path / "c.sqlite"
    with EmbeddingCache(path) as cache:
        cache.put("enc", "", 0, ["kept"], np.ones((1, 4), np.float32))
    script = textwrap.dedent(
        f"""
        import os, numpy as np
        from genembed.eval.embedding_cache import EmbeddingCache, text_hash
        cache = EmbeddingCache({str(path)!r})
        conn = cache._conn
        conn.execute("BEGIN")
        rows = [("enc", text_hash(""), 0, text_hash(f"t{{i}}"), np.ones(4, np.float32).tobytes()) for i in range(5000)]
        conn.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?)", rows)
        os._exit(9)  # killed before COMMIT
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 9, result.stderr
    with EmbeddingCache(path) as cache:
        assert cache.count() == 1
        assert np.array_equal(cache.get("enc", "", 0, ["kept"])[0], np.ones(4))
        assert cache.get("enc", "", 0, ["t0", "t4999"]) == {}
        cache.put("enc", "", 0, ["after"], np.zeros((1, 4), np.float32))  # still writable
        assert cache.count() == 2


def test_an_unreadable_file_is_a_clear_error(tmp_path):
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(DamagedFileError, match=f"embedding cache {path} is unreadable .* Delete it"):
        EmbeddingCache(path)


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_a_damaged_cache_of_real_embeddings_names_its_file(tiny_model, tmp_path, damage):
    from genembed.eval import GenembedEncoder
    from genembed.eval.encoding import TextEmbedder

    path = tmp_path / "c.sqlite"
    texts = [f"text number {i} about {word}" for i, word in enumerate(["guitars", "Paris", "foxes"] * 40)]
    with EmbeddingCache(path) as cache:
        first = TextEmbedder(GenembedEncoder(tiny_model, steps=2), cache, progress=False)(texts, "")
    data = path.read_bytes()
    assert len(data) > 40_000  # the rows are in the main file (the WAL was checkpointed at close)
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(data[:5000] + bytes(len(data) - 10_000) + data[-5000:])  # pages of zeros
    with (
        pytest.raises(DamagedFileError, match="the file is damaged. Delete it") as caught,
        EmbeddingCache(path) as cache,
    ):
        TextEmbedder(GenembedEncoder(tiny_model, steps=2), cache, progress=False)(texts, "")
    assert f"embedding cache {path} is unreadable" in str(caught.value)
    path.unlink()  # what the message says: the next run encodes again, with the same result
    with EmbeddingCache(path) as cache:
        again = TextEmbedder(GenembedEncoder(tiny_model, steps=2), cache, progress=False)(texts, "")
    np.testing.assert_array_equal(again, first)
