"""The centers shipped with the bundled adapters: ``centers.safetensors`` in each adapter's folder.

For each shipped adapter folder (``genembed.models.adapters.shipped_folders``: an alias's folder once),
loads the bundled backbone with it in float32 and stores the centers (:mod:`genembed.encoders.centering`)
of the instructions a server names (``genembed.serve.instructions.named_instructions``: the one table of
named instructions, ``genembed.encoders.instructions.NAMED_INSTRUCTIONS``, which is also the model's
``prompts``), with the model's default settings, so that ``genembed.load()`` and a fresh ``genembed serve``
compute none of them:

    make centers    # GENEMBED_CENTER_CACHE=off .venv/bin/python experiments/make_centers.py

Rerun it when the calibration texts, an adapter, the default settings or a named instruction change
(a centers file made from other calibration texts is ignored, with a warning, when loaded).
"""

from __future__ import annotations

import time

import genembed
from genembed.encoders.centering import center_cache, save_centers
from genembed.models.adapters import shipped_folders
from genembed.serve.instructions import named_instructions


def main() -> None:
    for folder in shipped_folders():
        start = time.perf_counter()
        model = genembed.load(adapter=folder, dtype="float32", device="cpu")
        center_cache(model.backbone).stored.clear()  # computed afresh, not carried over from an older file
        instructions = list(named_instructions(model).values())
        written = save_centers(model.backbone, folder, model.embed_settings(), instructions)
        print(f"{folder}: {len(written)} centers in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
