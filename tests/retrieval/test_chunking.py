from __future__ import annotations

import json

import pytest

from genembed.retrieval.chunking import Document, SourceError, chunk_documents, read_sources


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), "utf-8")
    return path


def test_reads_jsonl_text_markdown_and_folders(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"id": 1, "title": " T ", "text": " one "}, "", {"id": "b", "text": "two"}])
    (tmp_path / "notes.txt").write_text("plain text\n", "utf-8")
    sub = tmp_path / "docs"
    sub.mkdir()
    (sub / "guide.md").write_text("intro\n\n# The Guide #\n\nbody", "utf-8")
    (sub / ".hidden.md").write_text("# skip me", "utf-8")
    (sub / "image.png").write_bytes(b"\x89PNG")
    docs = read_sources([tmp_path / "a.jsonl", tmp_path / "notes.txt", sub])
    assert [(d.id, d.title, d.text) for d in docs] == [
        ("1", "T", "one"),
        ("b", "", "two"),
        ((tmp_path / "notes.txt").as_posix(), "", "plain text"),
        ((sub / "guide.md").as_posix(), "The Guide", "intro\n\n# The Guide #\n\nbody"),
    ]
    assert docs[1].source == f"{tmp_path / 'a.jsonl'}:3"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": 1, "text": "x"', "a.jsonl:2: not valid JSON"),
        ('["x"]', "a.jsonl:2: each line must be a JSON object with 'id' and 'text', got list"),
        ('{"text": "x"}', "a.jsonl:2: missing field 'id'"),
        ('{"id": 2}', "a.jsonl:2: missing field 'text'"),
        ('{"id": 2, "text": 5}', "a.jsonl:2: field 'text' must be a string, got int"),
        ('{"id": 2, "text": "x", "title": null}', "a.jsonl:2: field 'title' must be a string, got NoneType"),
        ('{"id": [2], "text": "x"}', "a.jsonl:2: field 'id' must be a string or an integer"),
        ('{"id": 2, "text": "  "}', "a.jsonl:2: field 'text' is empty"),
        ('{"id": 1, "text": "again"}', "a.jsonl:2: duplicate document id '1' (first seen at"),
    ],
)
def test_bad_jsonl_names_file_line_and_field(tmp_path, line, message):
    _jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "ok"}, line])
    with pytest.raises(SourceError, match=message.replace("(", r"\(").replace("[", r"\[")):
        read_sources([tmp_path / "a.jsonl"])


def test_bad_files_and_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_sources([tmp_path / "missing.jsonl"])
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    with pytest.raises(SourceError, match=r"x.pdf: unsupported file type '.pdf'"):
        read_sources([tmp_path / "x.pdf"])
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(SourceError, match=r"latin.txt: not UTF-8 text \(byte 3"):
        read_sources([tmp_path / "latin.txt"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match="folder holds no"):
        read_sources([empty])


def test_chunks_are_token_windows_with_overlap(tiny):
    tok = tiny.tokenizer
    text = " ".join(f"word{i}" for i in range(60))
    doc = Document("d", "Title", text, "src")
    n_tokens = len(tok(text, add_special_tokens=False)["input_ids"])
    chunks = chunk_documents([doc], tok, chunk_tokens=20, overlap=5)
    assert [c.id for c in chunks] == [f"d#{i}" for i in range(len(chunks))]
    assert len(chunks) == -(-(n_tokens - 5) // 15)  # windows of 20 advancing by 15 cover all tokens
    for chunk in chunks:
        assert chunk.text in text and chunk.embed_text == f"Title {chunk.text}"
        assert abs(len(tok(chunk.text, add_special_tokens=False)["input_ids"]) - 20) <= 2 or chunk is chunks[-1]
    for a, b in zip(chunks, chunks[1:], strict=False):  # consecutive chunks share text
        start_b = text.index(b.text)
        assert text.index(a.text) < start_b < text.index(a.text) + len(a.text)
    assert chunks[0].text.startswith("word0") and chunks[-1].text.endswith("word59")
    assert chunk_documents([doc], tok, chunk_tokens=n_tokens + 10, overlap=0)[0].text == text


def test_bad_chunk_sizes(tiny):
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunk_documents([], tiny.tokenizer, chunk_tokens=0)
    with pytest.raises(ValueError, match="overlap"):
        chunk_documents([], tiny.tokenizer, chunk_tokens=8, overlap=8)
