"""benchmarks/instruct_axis_probe.py: a linear probe reads an axis that is present, not one that is absent."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("benchmarks/instruct_axis_probe.py")


def test_probe_reads_a_weak_direction_that_kmeans_would_miss(script):
    rng = np.random.default_rng(0)
    labels = ["pos", "neg"] * 100
    x = rng.normal(size=(200, 16))
    x[:, 0] *= 10  # a dominant direction that carries no label
    x[:, 1] += np.where(np.array(labels) == "pos", 1.5, -1.5)  # the label, on a weaker direction
    assert script.probe(x, labels) > 0.9
    assert script.probe(rng.normal(size=(200, 16)), labels) < 0.65  # nothing to read


def test_markdown_lists_every_instruction_and_axis(script):
    report = {
        "task": "t",
        "config": {"model": "m", "steps": [1, 5]},
        "probes": [{"instruction": "a", "axis": "b", "accuracy": [0.5, 0.75]}],
    }
    assert "| a | b | 0.500 | 0.750 |" in script.markdown(report)
