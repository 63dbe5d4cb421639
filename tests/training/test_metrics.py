"""The per-step metrics log survives a process killed while appending to it."""

from __future__ import annotations

import pytest

from genembed._files import DamagedFileError
from genembed.training.metrics import MetricsLog


def test_a_torn_last_line_is_dropped_and_truncate_keeps_the_checkpointed_steps(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        log.append({"step": step, "loss": 1.0 / step})
    with open(log.path, "a") as handle:
        handle.write('{"step": 4, "loss": 0.2')  # killed mid-write
    assert [r["step"] for r in log.read()] == [1, 2, 3]
    log.truncate(2)  # resuming from the checkpoint of step 2
    assert log.path.read_text() == '{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n'
    log.append({"step": 3, "loss": 0.25})
    assert [r["step"] for r in log.read()] == [1, 2, 3]


def test_damage_before_the_last_line_names_the_file_and_line(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo\n{"step": 3, "loss": 0.3}\n')
    with pytest.raises(DamagedFileError, match=rf"{log.path}:2 is not a JSON record"):
        log.truncate(3)
