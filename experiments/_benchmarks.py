"""Experiments reuse what the benchmarks define (the run record of ``_run_info.py``, the RAG data readers of
``rag_quality.py``, MiniLM's folder): importing this module puts ``benchmarks/`` on the import path."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.append(str(BENCHMARKS))
