"""The embedding-distillation map beside the adapter: saved, continued, refused when its shape differs."""

from __future__ import annotations

import logging

import torch

from genembed.training.losses import EmbeddingDistillation
from genembed.training.teacher_map import MAP_FILE, load_teacher_map, save_teacher_map


def test_a_saved_map_is_continued_and_a_missing_or_mismatched_one_starts_fresh(tmp_path, caplog):
    torch.manual_seed(0)
    trained = EmbeddingDistillation(6, 4)
    assert save_teacher_map(trained, tmp_path) == tmp_path / MAP_FILE
    fresh = EmbeddingDistillation(6, 4)
    assert load_teacher_map(fresh, tmp_path)
    torch.testing.assert_close(fresh.map.weight, trained.map.weight)
    assert not load_teacher_map(EmbeddingDistillation(6, 4), tmp_path / "nothing-here")
    other = EmbeddingDistillation(6, 5)
    before = other.map.weight.clone()
    with caplog.at_level(logging.WARNING):
        assert not load_teacher_map(other, tmp_path)
    assert "holds a map.weight of shape (4, 6), not (5, 6)" in caplog.text
    torch.testing.assert_close(other.map.weight, before)
