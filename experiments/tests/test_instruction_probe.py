"""The instruction probe's bare tasks: every instruction emptied, the name marked, the data kept."""

from __future__ import annotations

from pathlib import Path

import instruction_probe
import pytest

DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "dev"


@pytest.mark.skipif(not DEV.is_dir(), reason="shared dev data not found")
def test_bare_tasks_keep_their_data_and_lose_every_instruction():
    tasks = {task.name: task for task in instruction_probe.fast_tasks(DEV)}
    mrcr, stsb = instruction_probe.bare(tasks["mrcr-dev"]), instruction_probe.bare(tasks["stsb-dev"])
    assert tasks["stsb-dev"].instruction and stsb.instruction == "" and stsb.doc_instruction == ""
    assert stsb.name == "stsb-dev (bare)" and stsb.data is tasks["stsb-dev"].data
    assert mrcr.instructions == {"sentiment": "", "domain": ""} and all(tasks["mrcr-dev"].instructions.values())
