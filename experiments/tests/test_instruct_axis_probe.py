"""experiments/instruct_axis_probe.py: a linear probe reads an axis that is present, not one that is absent."""

from __future__ import annotations

import importlib

import numpy as np
import pytest


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("instruct_axis_probe")


def test_probe_reads_a_weak_direction_that_kmeans_would_miss(script):
    rng = np.random.default_rng(0)
    labels = ["pos", "neg"] * 100
    x = rng.normal(size=(200, 16))
    x[:, 0] *= 10  # a dominant direction that carries no label
    x[:, 1] += np.where(np.array(labels) == "pos", 1.5, -1.5)  # the label, on a weaker direction
    assert script.probe(x, labels) > 0.9
    assert script.probe(rng.normal(size=(200, 16)), labels) < 0.65  # nothing to read


def test_kmeans_spread_is_zero_for_clear_clusters_and_wide_for_two_equal_structures(script):
    rng = np.random.default_rng(0)
    a = np.repeat([0, 1], 100)
    b = np.tile([0, 1], 100)
    clear = rng.normal(scale=0.1, size=(200, 8))
    clear[:, 0] += 5 * a
    mean, std = script.kmeans_spread(clear, a.tolist(), seeds=5)
    assert mean == pytest.approx(100.0) and std == pytest.approx(0.0)
    two = rng.normal(scale=0.1, size=(200, 8))
    two[:, 0] += 5 * a
    two[:, 1] += 5 * b  # as strong as the first: k-means splits by one or the other, seed by seed
    mean, std = script.kmeans_spread(two, a.tolist(), seeds=20)
    assert std > 10 and 5 < mean < 95, (mean, std)


def test_markdown_lists_every_instruction_and_axis(script):
    report = {
        "task": "t",
        "config": {"model": "m", "steps": [1, 5], "seeds": 3},
        "probes": [
            {
                "instruction": "a",
                "axis": "b",
                "accuracy": [0.5, 0.75],
                "kmeans_mean": [1.0, 2.0],
                "kmeans_std": [0.5, 0.25],
            }
        ],
    }
    text = script.markdown(report)
    assert "| a | b | 0.500 | 0.750 |" in text and "| a | b | 1.00 ± 0.50 | 2.00 ± 0.25 |" in text
