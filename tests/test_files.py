"""The shared file helpers: reads that name a damaged file, never unpickle, and temp-file cleanup."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genembed._files import (
    DamagedFileError,
    atomic_write_npy,
    check_safetensors,
    file_digest,
    read_json,
    read_npy,
    read_safetensors,
    remove_temp_files,
)


def test_read_npy_checks_what_was_recorded_and_never_unpickles(tmp_path):
    path = tmp_path / "a.npy"
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    atomic_write_npy(path, array)
    recorded = file_digest(path) | {"shape": [2, 3], "dtype": "float32"}
    assert np.array_equal(read_npy(path, recorded, fix="Redo it."), array)
    with pytest.raises(DamagedFileError, match=rf"{path} holds an array of shape \[2, 3\], expected \[3, 2\]\. Redo"):
        read_npy(path, {"shape": [3, 2]}, fix="Redo it.")
    np.save(path, np.array([{"an": "object"}], dtype=object), allow_pickle=True)
    with pytest.raises(DamagedFileError, match=rf"{path} is not a readable \.npy array \(Object arrays cannot"):
        read_npy(path, fix="Redo it.")
    with pytest.raises(DamagedFileError, match=rf"{tmp_path / 'none.npy'} is missing\. Redo it\."):
        read_npy(tmp_path / "none.npy", fix="Redo it.")


def test_safetensors_and_json_reads_name_the_file(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "t.safetensors"
    save_file({"x": torch.arange(4.0)}, str(path))
    assert torch.equal(read_safetensors(path, file_digest(path), fix="")["x"], torch.arange(4.0))
    path.write_bytes(path.read_bytes()[:-4])
    for read in (lambda: read_safetensors(path, fix="Fix."), lambda: check_safetensors(path, fix="Fix.")):
        with pytest.raises(DamagedFileError, match=rf"{path} is not a readable safetensors file .*Fix\."):
            read()
    (tmp_path / "j.json").write_text('{"a": ')
    with pytest.raises(DamagedFileError, match="j.json is not valid JSON"):
        read_json(tmp_path / "j.json", fix="")


def test_remove_temp_files_deletes_only_what_killed_writers_left(tmp_path):
    (tmp_path / ".shard-000001.npy.tmp-4242").write_bytes(b"half")
    (tmp_path / ".step-0000003.tmp-abcd").mkdir()
    (tmp_path / ".step-0000003.tmp-abcd" / "state.json").write_text("{")
    (tmp_path / "shard-000000.npy").write_bytes(b"kept")
    (tmp_path / ".hidden").write_text("kept")
    remove_temp_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "shard-000000.npy"]
