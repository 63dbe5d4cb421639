"""benchmarks/README.md lists every benchmark script (and nothing that is not one)."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]


def test_every_script_is_in_the_table():
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(\w+\.py)` \|", readme, flags=re.M))
    assert listed == {path.name for path in BENCHMARKS.glob("*.py")}
