"""The benchmark scripts' tests are not the package's: ``make test`` runs ``tests/`` only, ``pytest
benchmarks/tests`` runs these. The scripts import their siblings, so ``benchmarks/`` goes on the import path."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
