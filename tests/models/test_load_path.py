"""The way of ``genembed.load`` visits each module once, in the order docs/architecture.md draws it.

While ``genembed.load`` runs, a profiler records the genembed modules that the two modules running the way
(``models/load.py`` and ``models/assemble.py``) call; calls inside those two, and whatever a called module
calls in turn (its helpers), are not steps. Each way must name each module in one stretch and follow the
numbered steps of the docs' ``genembed.load`` section."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest

import genembed

SRC = Path(genembed.__file__).resolve().parent
DOCS = SRC.parents[1] / "docs" / "architecture.md"
RUNNERS = {str(SRC / "models" / "load.py"), str(SRC / "models" / "assemble.py")}


def documented_path() -> list[str]:
    """The module each numbered step of the docs' ``genembed.load`` section names first."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## `genembed.load(...)`") : text.index("## `model.encode(texts, ...)`")]
    return re.findall(r"^\d+\. `([\w/]+\.py)`", section, flags=re.MULTILINE)


def steps_of(load) -> tuple[list[str], object]:
    """The modules the way's two runners call while ``load()`` runs, a module called again at once counted
    once; and what ``load`` returned."""
    steps: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_code.co_filename, frame.f_back.f_code.co_filename
        if caller in RUNNERS and callee != caller and callee.startswith(str(SRC)):
            module = Path(callee).relative_to(SRC).as_posix()
            if not steps or steps[-1] != module:
                steps.append(module)

    load()  # the modules imported once (an import runs module code, not a step)
    sys.setprofile(profile)
    try:
        model = load()
    finally:
        sys.setprofile(None)
    return steps, model


@pytest.fixture
def lora_folder(tmp_path, _tiny_backbone) -> Path:
    from peft import LoraConfig, get_peft_model

    folder = tmp_path / "lora"
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(_tiny_backbone.model), config).save_pretrained(folder)
    return folder


def test_the_docs_draw_a_way_with_each_module_once():
    path = documented_path()
    assert len(path) >= 10 and len(set(path)) == len(path), path
    assert all((SRC / module).is_file() for module in path), path


def test_each_way_of_load_visits_each_module_once_in_the_documented_order(tiny_folder, lora_folder, tmp_path):
    path = documented_path()
    saved = genembed.load(tiny_folder, adapter=lora_folder, generation_adapter=lora_folder).save(tmp_path / "saved")
    ways = {  # the way: (how it loads, the adapter and the weights that generate it gives)
        "local folder": (lambda: genembed.load(tiny_folder), (None, "base")),
        "with adapters": (
            lambda: genembed.load(tiny_folder, adapter=lora_folder, generation_adapter=lora_folder),
            ("lora", "generation"),
        ),
        "saved": (lambda: genembed.load(saved), ("lora", "generation")),
    }
    seen = set()
    for way, (load, expected) in ways.items():
        steps, model = steps_of(load)
        assert len(set(steps)) == len(steps), (way, steps)  # no module in two stretches
        assert steps == [module for module in path if module in steps], (way, steps)  # the documented order
        assert (model.adapter, model.generation_adapter) == expected, way
        seen |= set(steps)
    assert seen == set(path)  # every documented step runs on one of the ways


def test_a_published_checkpoint_takes_the_same_way(published_gircse):
    steps, model = steps_of(lambda: genembed.load("Roytsai27/GIRCSE-Mistral7B"))
    path = documented_path()
    assert len(set(steps)) == len(steps) and steps == [module for module in path if module in steps], steps
    assert model.method == "gircse" and model.center is False


def test_a_missing_or_damaged_adapter_fails_before_any_weights_load(tiny_folder, lora_folder, tmp_path, monkeypatch):
    from genembed._files import DamagedFileError
    from genembed.backbone import MissingModelError
    from genembed.models import load as loading

    monkeypatch.setattr(loading, "load_backbone", lambda *a, **k: pytest.fail("the backbone loaded first"))
    with pytest.raises(MissingModelError, match="holds no adapter_config.json"):
        genembed.load(tiny_folder, adapter=tmp_path)
    weights = lora_folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-20])
    for asked in ({"adapter": lora_folder}, {"generation_adapter": lora_folder}):
        with pytest.raises(DamagedFileError, match="adapter_model.safetensors"):
            genembed.load(tiny_folder, **asked)
