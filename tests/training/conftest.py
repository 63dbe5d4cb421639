"""Fixtures for the training tests: the small data files in tests/assets/training and a tiny-model run
config (the tiny model saved to a folder, ``tiny_folder``, is in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "training"


@pytest.fixture(scope="session")
def assets() -> Path:
    return ASSETS


@pytest.fixture(scope="session")
def run_config():
    """``run_config(output_dir, model, **sections)``: a small GIRCSE config on the asset data."""
    return tiny_run_config


def tiny_run_config(output_dir: Path, model: str | Path | None, **sections):
    """A small GIRCSE config on the tiny model and the asset data; ``sections`` update the defaults."""
    from genembed.training.config import config_from_dict

    raw = {
        "model": {"name": None if model is None else str(model)},
        "lora": {"r": 8, "alpha": 16, "dropout": 0.0},
        "embedding": {"steps": 3, "query_max_length": 40, "doc_max_length": 40},
        "loss": {"temperature": 0.05},
        "data": {
            "files": [{"path": str(ASSETS / "similar.jsonl"), "symmetric": True}],
            "batch_size": 6,
            "hard_negatives": 1,
        },
        "train": {"output_dir": str(output_dir), "max_steps": 6, "lr": 3e-3, "seed": 0, "progress": False},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return config_from_dict(raw)


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory) -> Path:
    """A sentence-transformers folder holding a random 2-layer BERT (hidden 32) with a character vocabulary:
    a stand-in for all-MiniLM-L6-v2 as a distillation teacher, built offline in about a second."""
    import string

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel, BertTokenizer

    root = tmp_path_factory.mktemp("tiny-teacher")
    chars = string.ascii_lowercase + string.digits + string.punctuation
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(root / "hf")
    BertTokenizer(str(root / "vocab.txt")).save_pretrained(root / "hf")
    model = SentenceTransformer(str(root / "hf"), device="cpu", local_files_only=True)  # mean pooling added
    model.max_seq_length = 128
    model.save(str(root / "st"))
    return root / "st"
