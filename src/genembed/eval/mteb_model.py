"""genembed models in MTEB 2.x: an encoder implementing mteb's ``EncoderProtocol``.

Needs the ``mteb`` extra (``pip install "genembed[mteb]"``); this module imports mteb at import time
and nothing in genembed imports it implicitly.

>>> import mteb
>>> from genembed.eval.mteb_model import GenembedMTEBModel
>>> model = GenembedMTEBModel(steps=5)          # the bundled default model, GIRCSE with K=5
>>> results = mteb.evaluate(model, mteb.get_tasks(tasks=["STSBenchmark"]))   # needs internet for the data

Instructions: for each task, ``prompts_dict`` (keys: task name, task type such as ``"STS"``, or
``"query"``/``"document"``; the usual mteb priority) wins, then the task's own ``prompt`` metadata,
then mteb's default prompt for the task type. Queries and symmetric texts (STS, classification,
clustering, pair classification) get the instruction; documents (``prompt_type="document"``) are
embedded without one, as GIRCSE and GRIT do, unless ``instruct_documents=True``.

A published checkpoint (:mod:`genembed.models.published`: ``GenembedMTEBModel("GritLM/GritLM-7B")``) is
evaluated as its authors' MTEB script does: their per-task instructions (queries and documents as
their table says), their K, and their normalisation (GritLM's MTEB run does not L2-normalise, which
matters to classification), unless ``prompts_dict`` is given. A task missing from their table falls
back to the rules above, with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction
from mteb.types import PromptType

from ..encoders.defaults import DEFAULT_BATCH_SIZE, DEFAULT_MAX_LENGTH
from ..encoders.methods import DEFAULT_STEPS, method_rules
from ..encoders.settings import EmbedSettings
from ..models.published import published_for

__all__ = ["GenembedMTEBModel", "genembed_model_meta"]

logger = logging.getLogger(__name__)


def genembed_model_meta(model: Any, settings: dict[str, Any], loader_kwargs: dict[str, Any] | None = None) -> ModelMeta:
    """A :class:`mteb.ModelMeta` describing a loaded genembed model and its encoding settings.

    The settings (method, steps, attention, prompt format, adapter) go into ``experiment_kwargs``,
    so mteb keeps results of different settings apart.
    """
    lm = model.backbone.model
    n_params = sum(p.numel() for p in lm.parameters())
    experiment = {k: v for k, v in settings.items() if v is not None}
    return ModelMeta(
        loader=GenembedMTEBModel,
        loader_kwargs=loader_kwargs or {},
        name=f"genembed/{model.backbone.name}",
        revision=None,
        release_date=None,
        languages=None,
        n_parameters=n_params,
        memory_usage_mb=round(sum(p.numel() * p.element_size() for p in lm.parameters()) / 2**20, 1),
        max_tokens=settings.get("max_length"),
        embed_dim=model.dim,
        license=None,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=True,
        training_datasets=None,
        experiment_kwargs=experiment,
    )


class GenembedMTEBModel(AbsEncoder):
    """A genembed model as an mteb encoder (``mteb.evaluate(GenembedMTEBModel(...), tasks)``).

    Args:
        model_name: None for the bundled default model, or a local HF folder / ``.gguf`` file / cached
            hub id (as :func:`genembed.load`).
        revision: unused (kept for mteb's loader signature).
        device: torch device (default ``"auto"``: CUDA, then MPS, then the CPU).
        model: an already loaded :class:`~genembed.GenerativeEmbedder` (then ``model_name`` is ignored).
        adapter: LoRA adapter folder.
        method, steps, attention, prompt_format, max_length, batch_size: encoding settings, as in
            :meth:`genembed.GenerativeEmbedder.encode`; None: the model's own (a published
            checkpoint's: its authors' K and format).
        prompts_dict: instructions by task name, task type or prompt type (overrides the task's and a
            published checkpoint's).
        instruct_documents: also give documents the instruction.
        dtype: model dtype when loading.
    """

    def __init__(
        self,
        model_name: str | None = None,
        revision: str | None = None,
        *,
        device: str | None = None,
        model: Any = None,
        adapter: str | None = None,
        method: str | None = None,
        steps: int | None = None,
        attention: str | None = None,
        prompt_format: str | None = None,
        max_length: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        prompts_dict: dict[str, str] | None = None,
        instruct_documents: bool = False,
        dtype: str = "auto",
        **kwargs: Any,
    ):
        if model is None:
            import genembed

            model = genembed.load(model_name, adapter=adapter, dtype=dtype, device=device or "auto")
        self.model = model
        self.prompts_dict = prompts_dict
        self.instruct_documents = instruct_documents
        # a published checkpoint's authors' instructions and normalisation (not when the caller gives prompts)
        self.published = published_for(model) if prompts_dict is None else None
        own = method is None or method == model.method
        method = model.method if method is None else method
        steps = (model.steps if own and isinstance(model.steps, int) else DEFAULT_STEPS) if steps is None else steps
        self.encode_settings = {"method": method, "steps": steps}
        self.encode_settings |= {"attention": model.attention if own and attention is None else attention}
        own_format = model.prompt_format if own else None
        self.encode_settings |= {"prompt_format": own_format if prompt_format is None else prompt_format}
        self.encode_settings |= {
            "max_length": max_length
            or (self.published.max_length if self.published else getattr(model, "max_length", DEFAULT_MAX_LENGTH))
        }
        self.normalize = self.published.normalize_eval if self.published else True
        self.batch_size = batch_size
        EmbedSettings.build(**self.encode_settings, tau=model.tau)  # bad settings fail now, not mid-benchmark
        loader_kwargs = {"adapter": adapter, **self.encode_settings, "prompts_dict": prompts_dict}
        settings = {**self.encode_settings, "adapter": model.adapter, "instruct_documents": instruct_documents}
        if self.published is not None:
            source = self.published.instruction_set().source
            settings |= {"instructions": f"{source['repo']}@{source['commit']}", "normalize": self.normalize}
        if not method_rules(method).uses_steps:
            settings.pop("steps")
        self.mteb_model_meta = genembed_model_meta(model, settings, loader_kwargs)

    def instruction_for(self, task_metadata: Any, prompt_type: PromptType | None) -> str:
        """The instruction a text of this task and prompt type is embedded with ("" for documents; a
        published checkpoint: its authors' instruction for the task and side)."""
        if self.published is not None:
            side = {PromptType.query: "query", PromptType.document: "document"}.get(prompt_type)
            found = self.published.instruction_set().for_task(task_metadata.name, side)
            if found is not None:
                return found
            logger.warning(
                "%s has no instruction of its authors for %s; using the task's", self.published.id, task_metadata.name
            )
        if prompt_type == PromptType.document and not self.instruct_documents:
            return ""
        return self.get_instruction(task_metadata, prompt_type) or ""

    def encode(
        self,
        inputs: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        prompt_type: PromptType | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embed every text of the dataloader ``inputs`` (``(n, dim)`` float32, L2-normalised)."""
        texts = [text for batch in inputs for text in batch["text"]]
        return self.model.encode(
            texts,
            instruction=self.instruction_for(task_metadata, prompt_type),
            batch_size=int(kwargs.get("batch_size") or self.batch_size),
            show_progress_bar=kwargs.get("show_progress_bar"),
            normalize=self.normalize,
            **self.encode_settings,
        )
