from __future__ import annotations

import json

import pytest

DOCS = [
    {"id": "france", "title": "France", "text": "What is the capital of France? Paris is the capital of France."},
    {"id": "fox", "title": "Animals", "text": "The quick brown fox jumps over the lazy dog. The dog sleeps."},
    {"id": "guitar", "title": "", "text": "A man is playing a guitar on the stage. I love this movie, it is moving."},
    {"id": "product", "title": "Review", "text": "The product broke after two days, very disappointing."},
    {"id": "emotion", "title": "", "text": "Classify the emotion expressed in the given text. I love it."},
]
MORE = [
    {"id": "retrieve", "title": "Search", "text": "Given a question, retrieve passages that answer it."},
    {"id": "similar", "title": "", "text": "Retrieve semantically similar text. A man is playing a guitar."},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


@pytest.fixture
def docs_file(tmp_path):
    return write_jsonl(tmp_path / "docs.jsonl", DOCS)


@pytest.fixture
def more_file(tmp_path):
    return write_jsonl(tmp_path / "more.jsonl", MORE)


@pytest.fixture
def model_dir(tmp_path, tiny):
    """The tiny model saved as a Hugging Face folder, for the CLI's --model."""
    folder = tmp_path / "tiny-model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder
