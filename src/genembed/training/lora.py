"""Make a causal LM trainable: LoRA adapters through peft, or full fine-tuning; save the result."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .._peft import quiet_peft

__all__ = [
    "add_lora",
    "continue_lora",
    "freeze_lower_layers",
    "make_trainable",
    "save_trained",
    "trained_settings",
    "trainable_state",
    "load_trainable_state",
]


def add_lora(
    model: Any,
    *,
    r: int = 16,
    alpha: float = 32.0,
    dropout: float = 0.05,
    target_modules: str | list[str] = "all-linear",
) -> Any:
    """Wrap ``model`` with fresh LoRA adapters (peft); only the adapter weights are trainable.

    Args:
        model: a transformers causal LM.
        r: rank of each adapter.
        alpha: scaling numerator (the update is scaled by ``alpha / r``).
        dropout: dropout on the adapter inputs.
        target_modules: ``"all-linear"`` (every linear projection except the LM head) or module names
            such as ``["q_proj", "v_proj"]``.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, bias="none", task_type="CAUSAL_LM"
    )
    with quiet_peft():
        return get_peft_model(model, config)


def continue_lora(model: Any, adapter: str | os.PathLike) -> Any:
    """Wrap ``model`` with the trained LoRA adapter in folder ``adapter`` (peft), trainable: training
    continues from its weights, with its rank, alpha and target modules.

    Raises:
        MissingModelError: ``adapter`` holds no ``adapter_config.json``.
    """
    from peft import PeftModel

    from ..models.adapters import adapter_folder

    with quiet_peft():
        return PeftModel.from_pretrained(model, str(adapter_folder(adapter)), is_trainable=True)


def make_trainable(model: Any, *, lora: bool, init_from: str | os.PathLike | None = None, **lora_kwargs: Any) -> Any:
    """LoRA-wrapped model (``lora=True``; fresh adapters, or the trained adapter in folder ``init_from``)
    or the model itself with every weight trainable, in train mode."""
    if lora and init_from is not None:
        model = continue_lora(model, init_from)
    elif lora:
        model = add_lora(model, **lora_kwargs)
    else:
        for param in model.parameters():
            param.requires_grad_(True)
    return model.train()


def freeze_lower_layers(model: Any, n: int) -> int:
    """Stop training the weights of the first ``n`` decoder layers (LoRA or full); returns how many tensors.

    They keep the values they were loaded with, so the forward pass is unchanged. Autograd then skips
    the backward pass through those layers wherever nothing below needs a gradient: the prompt tokens'
    positions. The soft tokens fed back from the top (GIRCSE) still carry gradients through them.

    Raises:
        ValueError: ``n`` is not below the model's number of decoder layers.
    """
    layers = int(getattr(model.config, "num_hidden_layers", 0))
    if not 0 <= n < layers:
        raise ValueError(f"lora.frozen_layers must be in [0, {layers}) for this {layers}-layer model, got {n}")
    pattern = re.compile(r"\.layers\.(\d+)\.")
    frozen = 0
    for name, param in model.named_parameters():
        match = pattern.search(name)
        if param.requires_grad and match and int(match.group(1)) < n:
            param.requires_grad_(False)
            frozen += 1
    return frozen


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The trainable weights by name (what a checkpoint must hold), detached CPU copies."""
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy weights saved by :func:`trainable_state` back; names must match exactly."""
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    if set(params) != set(state):
        missing, extra = sorted(set(params) - set(state)), sorted(set(state) - set(params))
        raise ValueError(f"checkpoint does not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(state[name].to(param.device, param.dtype))


def save_trained(
    model: Any, tokenizer: Any, folder: str | os.PathLike, *, settings: Mapping[str, Any] | None = None
) -> list[str]:
    """Save the adapter (peft model) or the full model plus tokenizer into ``folder``; return the file names.

    An adapter folder loads with ``genembed.load(base_model, adapter=folder)``, embedding with the
    settings it was trained with: ``settings`` (:func:`trained_settings`), written beside it as
    ``genembed.json``. A full model folder loads with ``genembed.load(folder)``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    if not hasattr(model, "peft_config"):  # a full model folder is loadable on its own
        tokenizer.save_pretrained(folder)
    elif settings is not None:
        from ..models.save import write_settings

        write_settings(folder, settings)
    return sorted(p.name for p in folder.iterdir())


def trained_settings(cfg: Any, backbone: Any, folder: str | os.PathLike) -> dict[str, Any]:
    """The ``genembed.json`` of an adapter trained by the run config ``cfg`` on ``backbone``, to be written
    in ``folder``: the embedding settings it was trained with (method, steps, attention, prompt format,
    tau; prompts up to the default length, uncentered, whole vectors), in the format ``model.save``
    writes, so ``genembed.load(base, adapter=folder)`` embeds as the adapter was trained
    (:func:`genembed.models.save.adapter_settings`)."""
    from ..encoders.model_settings import ModelSettings
    from ..encoders.settings import EMBEDDING_FIELDS
    from ..models.save import settings_record

    trained = cfg.embedding.settings()  # centring and truncate_dim are not training settings: their defaults
    own = {key: getattr(trained, key) for key in ModelSettings.fields_in("encode") if key in EMBEDDING_FIELDS}
    settings = ModelSettings(**own)
    encode = {"encode": settings.to_dict()["encode"]}  # not the named instructions: they stay the package's
    return settings_record(backbone, Path(folder), adapter=Path(folder).name, saved=encode)
