"""The ``README.md`` that :meth:`genembed.GenerativeEmbedder.save` writes beside the weights: a Hugging
Face model card saying what the model is (base model by name, adapter), how it embeds (method, K,
attention, prompt format, tau, centering, named instructions), how the adapter was trained (when its
saved training config says so) and its scores (when the caller knows them).

It holds no path of the machine that wrote it: files are named by their file names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..encoders.defaults import DEFAULT_MAX_LENGTH

__all__ = ["model_card", "portable"]


def portable(value: Any) -> Any:
    """``value`` (a training config) with every absolute path replaced by its file name, recursively."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item) for item in value]
    if isinstance(value, str) and os.path.isabs(value):
        return Path(value).name
    return value


def model_card(
    settings: Mapping[str, Any],
    *,
    title: str,
    base_model: str | None,
    training: Mapping[str, Any] | None = None,
    scores: Mapping[str, float] | None = None,
) -> str:
    """The card's Markdown (YAML front matter + text).

    Args:
        settings: what ``genembed.json`` holds (:mod:`genembed.models.save`).
        title: the model's name (the saved folder's).
        base_model: the backbone's hub id (front matter ``base_model``); None when it has none.
        training: the adapter's training config (``genembed train``'s resolved YAML), when saved.
        scores: task name: score (x100), when known.
    """
    encode, backbone = settings["encode"], settings["backbone"]
    front = ["---", "library_name: genembed", "pipeline_tag: feature-extraction"]
    front += ["tags:", "- genembed", "- sentence-embeddings", f"- {encode['method']}"]
    if base_model:
        front.append(f"base_model: {base_model}")
    front.append("---")
    adapter = f" with the LoRA adapter `{settings['adapter']}`" if settings.get("adapter") else ""
    lines = [
        f"# {title}",
        "",
        f"A [genembed](https://pypi.org/project/genembed/) embedding model: the decoder LLM "
        f"`{backbone['name']}`{adapter}, used as an embedding model.",
        "",
        "```python",
        "import genembed",
        "",
        f'model = genembed.load("{title}")  # this folder, or its hub id once uploaded',
        'q = model.encode_query("how do plants make food?")',
        'd = model.encode_document(["Photosynthesis turns light into sugar.", "Tax law is complex."])',
        "model.similarity(q, d)",
        "```",
        "",
        "## How it embeds",
        "",
        "Saved in `genembed.json`; `genembed.load` and every `genembed` command use these unless told otherwise.",
        "",
        "| setting | value |",
        "|---|---|",
        f"| method | {encode['method']} |",
        f"| soft tokens K (steps) | {encode['steps']} |",
        f"| attention | {encode['attention'] or 'the method default'} |",
        f"| prompt format | {encode['prompt_format'] or 'the method default'} |",
        f"| tau | {encode['tau']} |",
        f"| tokens per text (max_length) | {encode.get('max_length', DEFAULT_MAX_LENGTH)} |",
        f"| per-instruction centering | {'on' if encode['center'] else 'off'} |",
        f"| similarity | {settings.get('similarity_fn_name', 'cosine')} |",
        f"| backbone | {_backbone_row(backbone)} |",
    ]
    if encode.get("truncate_dim"):
        lines.append(f"| dimensions kept | {encode['truncate_dim']} |")
    prompts = settings.get("prompts") or {}
    if prompts:
        lines += ["", "Named instructions (`prompt_name=`; none: the caller's instruction):", ""]
        default = settings.get("default_prompt_name")
        for name, text in prompts.items():
            shown = "none" if text is None else f'"{text}"' if text else '"" (no instruction)'
            lines.append(f"- `{name}`: {shown}" + (" (the default)" if name == default else ""))
    if training:
        lines += ["", "## Training", "", *_training_lines(training)]
    if scores:
        lines += ["", "## Scores", "", "| task | score |", "|---|---|"]
        lines += [f"| {task} | {score:.2f} |" for task, score in scores.items()]
    return "\n".join(front + [""] + lines) + "\n"


def _backbone_row(backbone: Mapping[str, Any]) -> str:
    source = backbone["source"]
    if source == "bundled":
        return "the bundled default (genembed installs it)"
    if source.endswith("/") and not source.startswith("."):
        return f"weights in `{source}` of this folder"
    if source.startswith("."):
        return f"`{source}`, relative to this folder"
    return f"`{source}` (a hub id)"


def _training_lines(config: Mapping[str, Any]) -> list[str]:
    """What the adapter's training config says about how it was trained, one fact per line."""
    embedding, train = config.get("embedding") or {}, config.get("train") or {}
    loss, data, lora = config.get("loss") or {}, config.get("data") or {}, config.get("lora") or {}
    generative = config.get("generative") or {}
    lines = []
    if embedding:
        lines.append(
            f"- Contrastive training of method `{embedding.get('method')}` with {embedding.get('attention')} "
            f"attention, K={embedding.get('steps')}, loss temperature {loss.get('temperature')}."
        )
    if generative.get("files") and float(generative.get("weight", 1.0)) > 0:
        names = ", ".join(Path(str(f.get("path", f))).name for f in _entries(generative["files"]))
        lines.append(f"- Plus a next-token loss (weight {generative.get('weight')}) on {names}: it also generates.")
    files = _entries(data.get("files") or [])
    if files:
        names = ", ".join(Path(str(f.get("path"))).name for f in files)
        lines.append(f"- Data: {names}; batch size {data.get('batch_size')}.")
    if train:
        lines.append(
            f"- {train.get('max_steps')} steps, learning rate {train.get('lr')} ({train.get('schedule')}), "
            f"{train.get('precision')} precision, seed {train.get('seed')}."
        )
    if lora.get("enabled"):
        start = f", continued from `{Path(str(lora['init_from'])).name}`" if lora.get("init_from") else ""
        lines.append(f"- LoRA r={lora.get('r')}, alpha={lora.get('alpha')} on {lora.get('target_modules')}{start}.")
    return lines + ["", "The full training config is saved beside the adapter."]


def _entries(files: Any) -> list[dict[str, Any]]:
    """A config's file list as dicts (an entry may be a bare path)."""
    return [f if isinstance(f, dict) else {"path": f} for f in files]
