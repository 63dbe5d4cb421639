"""The shared file helpers: atomic writes, reads that name a damaged file, never unpickle, temp-file
cleanup, and JSON-lines input whose errors name file, line and field."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

from genembed._files import (
    DamagedFileError,
    FileFormatError,
    atomic_write,
    atomic_write_files,
    atomic_write_npy,
    atomic_write_text,
    check_safetensors,
    file_digest,
    read_json,
    read_jsonl,
    read_lines,
    read_npy,
    read_safetensors,
    remove_temp_files,
    require_field,
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


def test_atomic_writes_leave_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "sub" / "a.txt"
    atomic_write_text(path, "old")
    assert path.read_text() == "old" and oct(path.stat().st_mode & 0o777) == "0o644"

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(path, fail)
    assert path.read_text() == "old"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.txt"]  # no temp file left
    atomic_write_text(path, b"new")
    assert path.read_bytes() == b"new"


def test_atomic_write_files_moves_each_file_into_a_folder_that_holds_others(tmp_path):
    (tmp_path / "keep.txt").write_text("kept")
    (tmp_path / "a.txt").write_text("old")
    with atomic_write_files(tmp_path) as tmp:
        (tmp / "a.txt").write_text("new")
        (tmp / "b.txt").write_text("b")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"keep.txt": "kept", "a.txt": "new", "b.txt": "b"}
    with pytest.raises(RuntimeError), atomic_write_files(tmp_path) as tmp:
        (tmp / "a.txt").write_text("newer")
        raise RuntimeError("killed")
    assert (tmp_path / "a.txt").read_text() == "new" and len(os.listdir(tmp_path)) == 3


def test_read_jsonl_streams_rows_and_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n  \n{"a": 2}\n[1]\n')
    rows = read_jsonl(path)
    assert next(rows) == (1, {"a": 1})  # streamed: the bad last line is not read yet
    assert next(rows) == (4, {"a": 2})
    with pytest.raises(FileFormatError, match=rf"^{path}:5: each line must be a JSON object, got list$") as info:
        next(rows)
    assert (info.value.path, info.value.line) == (str(path), 5)
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(FileFormatError, match=rf"^{path}:2: not valid JSON \(Expecting value at column 7\)$"):
        list(read_jsonl(path))
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(FileFormatError, match=rf"^{path}:2: not UTF-8 text \(byte 7 of the line"):
        list(read_jsonl(path))
    path.write_text("\n")
    with pytest.raises(FileFormatError, match=rf"^{path}: holds no rows$"):
        list(read_jsonl(path))
    assert list(read_jsonl(path, allow_empty=True)) == []
    with pytest.raises(FileFormatError, match="none.jsonl: file not found"):
        list(read_lines(tmp_path / "none.jsonl"))


def test_read_jsonl_raises_the_callers_subclass_and_it_pickles(tmp_path):
    class TaskError(FileFormatError):
        pass

    (tmp_path / "t.jsonl").write_text("3\n")
    with pytest.raises(TaskError, match="t.jsonl:1: each line must be a row with 'id', got int") as info:
        list(read_jsonl(tmp_path / "t.jsonl", error=TaskError, expected="a row with 'id'"))
    copy = pickle.loads(pickle.dumps(FileFormatError(info.value.path, 1, info.value.message)))
    assert (str(copy), copy.path, copy.line) == (str(info.value), info.value.path, 1)


@pytest.mark.parametrize(
    ("row", "kind", "options", "message"),
    [
        ({}, str, {}, "f.jsonl:3: missing field 'x' (fields: [])"),
        ({"x": 5}, str, {}, "f.jsonl:3: field 'x' must be a string, got int 5"),
        ({"x": True}, (str, int), {}, "f.jsonl:3: field 'x' must be a string or an integer, got bool true"),
        ({"x": float("nan")}, float, {}, "f.jsonl:3: field 'x' must be a finite number, got float NaN"),
        ({"x": " "}, str, {"nonblank": True}, "f.jsonl:3: field 'x' is empty"),
        ({"x": "a" * 70}, int, {}, f"f.jsonl:3: field 'x' must be an integer, got str \"{'a' * 59}..."),
    ],
)
def test_require_field_names_file_line_and_field(row, kind, options, message):
    with pytest.raises(FileFormatError) as info:
        require_field(row, "x", kind, "f.jsonl", 3, **options)
    assert str(info.value) == message


def test_require_field_returns_values_and_defaults():
    assert require_field({"x": 3}, "x", float, "f", 1) == 3
    assert require_field({"x": 3}, "x", (str, int), "f", 1) == 3
    assert require_field({}, "x", str, "f", 1, default="") == ""
    assert require_field({"x": " "}, "x", str, "f") == " "
