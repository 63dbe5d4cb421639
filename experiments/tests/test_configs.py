"""Every experiment config in experiments/configs loads (its base files found, every key known); the lever
rows in experiments/configs/levers are checked by test_lever_ablation.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from genembed.training.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "experiments" / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_experiment_configs_load(name):
    cfg = load_config(CONFIGS / name)
    assert cfg.data.files
    # relative paths point where they did before the configs moved: the shared data beside the checkout, runs/
    for f in cfg.data.files:
        path = Path(f.path).resolve()
        assert path.is_relative_to(REPO.parent / "shared" / "data") or path.is_relative_to(REPO / "runs"), f.path
