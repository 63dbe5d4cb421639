"""What every route shares: the model, its worker thread, the embedding batcher, a token counter,
the named instructions and the metrics."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from fastapi import Request

from ..encoders import center_files
from ..encoders.centering import calibration_texts, center_cache, center_key, instruction_center, weights_id
from ..encoders.embedder import encode_texts
from ..encoders.output import RAW_NORMALISED, OutputPipeline
from ..encoders.prompts import EncodedPrompt, encode_prompts
from ..encoders.settings import EmbedSettings, RunOptions
from ..models.trained_for import warn_if_untrained
from .batcher import EmbeddingBatcher
from .centers import CalibrationKey, CenterScheduler
from .errors import APIError
from .instructions import named_instructions
from .metrics import ServeMetrics
from .settings import ServeSettings
from .token_input import TokenDecoder
from .worker import ModelWorker

__all__ = ["EmbedKey", "ServingState", "get_state"]


@dataclass(frozen=True)
class EmbedKey:
    """The batch key of a client's texts: requests with equal keys share forward passes. ``center`` (the
    instruction's center, None: uncentered) follows from the other two, so it is not compared."""

    instruction: str
    steps: int | str  # GIRCSE K or "auto"
    center: torch.Tensor | None = field(default=None, compare=False, repr=False)


class ServingState:
    """The serving side of one loaded model.

    Args:
        model: a :class:`~genembed.GenerativeEmbedder` (``genembed.load()``).
        settings: limits and batching.

    Raises:
        ValueError: ``settings.token_encoding`` cannot be loaded.
    """

    def __init__(self, model: Any, settings: ServeSettings):
        self.model = model
        self.settings = settings
        self.model_id = settings.model_id or model.name
        self.created = int(time.time())
        self.worker = ModelWorker(max_active=settings.max_queue)
        self.batcher: EmbeddingBatcher | None = None
        self.centers: CenterScheduler | None = None
        self._settings_by_steps: dict[int | str, EmbedSettings] = {}
        self.run = RunOptions(batch_size=settings.encode_batch_size)  # the speed switches of every batch
        # The model thread tokenizes with the model's tokenizer; a fast tokenizer must not be used by
        # two threads at once, so the event loop counts tokens with its own copy.
        self.tokenizer = copy.deepcopy(model.backbone.tokenizer)
        self.instructions = named_instructions(model, settings.instructions)
        # what every response's vectors go through (the model's centring and truncate_dim, normalised)
        self.output = OutputPipeline.of(model)
        if settings.center_cache_size is not None:
            center_cache(model.backbone).max_size = settings.center_cache_size
        self.token_decoder = TokenDecoder(self.tokenizer, settings.token_encoding)
        self.metrics = ServeMetrics()
        self.metrics.watch_queues(lambda: self.batcher.queued if self.batcher else 0, lambda: self.worker.active)

    def start(self) -> None:
        """Start the batcher (needs the running event loop)."""
        s = self.settings
        self.batcher = EmbeddingBatcher(
            self._encode,
            self.worker.run,
            max_batch_tokens=s.max_batch_tokens,
            max_batch_requests=s.max_batch_requests,
            max_queue=s.max_queue,
            on_batch=self.metrics.observe_batch,
        )
        self.batcher.start()
        self.centers = CenterScheduler(
            self.model.backbone,
            self.batcher,
            self.embedding_items,
            max_active=s.max_centering,
            max_queue=s.max_centering_queue,
            max_wait=s.max_centering_wait,
        )

    async def close(self) -> None:
        """Finish accepted requests, then stop the model thread."""
        if self.batcher is not None:
            await self.batcher.close()
        self.worker.shutdown()

    def warm_up(self) -> int:
        """Make the first request as fast as the next ones; runs on the model thread before it.

        With a centering model, loads or computes the centers of the named instructions for requests
        that leave the settings at their defaults, and keeps them for the server's life (the cache of
        other instructions' centers cannot push them out); and digests the weights the disk cache of
        centers is keyed by (when requests may bring their own instructions). Then embeds one text,
        which pays the one-off costs of a process's first forward pass (about a second on a CPU).

        Returns:
            How many centers had to be computed (none when they are stored with the model).
        """
        s = self.settings
        cache = center_cache(self.model.backbone)
        before = cache.computed
        if self.output.center:
            embed_settings = self.embed_settings(s.default_steps)
            for instruction in dict.fromkeys(self.instructions.values()):
                cache.keep(
                    center_key(embed_settings, instruction),
                    instruction_center(self.model.backbone, embed_settings, instruction),
                )
            if not s.center_named_only and center_files.cache_folder() is not None:
                weights_id(self.model.backbone)  # now, not on the event loop at the first new instruction
        settings = self.embed_settings(s.default_steps)
        warn_if_untrained(self.model.trained_for, self.model.adapter, settings.method, settings.attention)
        text = calibration_texts()[0]
        (prompt,) = self.embedding_prompts([text], "")  # no request runs yet: the tokenizer is free
        if prompt.text_start + len(prompt.ids) - prompt.text_end < s.max_input_tokens:  # else every request gets 413
            self._encode(EmbedKey("", s.default_steps), [(text, self.cut_prompts([text], [prompt], "")[0])])
        return cache.computed - before

    def embed_settings(self, steps: int | str) -> EmbedSettings:
        """The settings the server embeds with at ``steps`` (a number or ``"auto"``, at most ``max_steps``)."""
        found = self._settings_by_steps.get(steps)
        if found is None:
            s = self.settings
            found = self._settings_by_steps[steps] = self.model.embed_settings(
                method=s.method,
                steps=steps,
                prompt_format=s.prompt_format,
                max_length=s.max_input_tokens,
                max_steps=s.max_steps,
            )
        return found

    def centers_instruction(self, instruction: str) -> bool:
        """Whether embeddings made with ``instruction`` are centred (``--center-named-only`` leaves a
        request's own instructions uncentered)."""
        named = instruction in self.instructions.values()
        return self.output.center and (named or not self.settings.center_named_only)

    async def embed_key(self, instruction: str, steps: int | str) -> EmbedKey:
        """The batch key of texts embedded with ``instruction`` and ``steps``, with the instruction's
        center when it is centred (found, or computed within the centring budget; see
        :mod:`genembed.serve.centers`)."""
        if not self.centers_instruction(instruction):
            return EmbedKey(instruction, steps)
        assert self.centers is not None
        return EmbedKey(instruction, steps, await self.centers.center(self.embed_settings(steps), instruction, steps))

    def _encode(self, key: EmbedKey | CalibrationKey, items: list[tuple[str, EncodedPrompt]]) -> np.ndarray:
        """Run on the model thread: the L2-normalised embeddings of ``(text, prompt)`` items, centred when
        ``key`` says so (calibration texts are never centred: they make a center). The prompts were built
        on the event loop (:meth:`embedding_prompts`, cut by :meth:`cut_prompts`), so no text is tokenized
        twice; each instruction's prefix is computed once (:mod:`genembed.encoders.prefix_cache`)."""
        embeddings, _ = encode_texts(
            self.model.backbone,
            [text for text, _ in items],
            self.embed_settings(key.steps),
            run=self.run,
            instruction=key.instruction,
            prompts=[prompt for _, prompt in items],
            show_progress_bar=False,
        )
        if isinstance(key, CalibrationKey):  # a center is the mean of these, uncentered and whole
            return RAW_NORMALISED.apply(embeddings).numpy()
        return self.output.apply(embeddings, key.center).numpy()

    def embedding_items(
        self, texts: list[str], instruction: str, steps: int | str
    ) -> tuple[list[tuple[str, EncodedPrompt]], list[int]]:
        """The ``(text, prompt)`` items :meth:`_encode` embeds (tokenized here, once, and cut to
        ``max_input_tokens`` as the encoder cuts them) and the tokens each runs through the model, prompt
        and soft tokens: what a batch budgets. For the calibration texts of a center."""
        prompts = self.cut_prompts(texts, self.embedding_prompts(texts, instruction), instruction)
        soft = self.soft_tokens(steps)
        return list(zip(texts, prompts, strict=True)), [len(p.ids) + soft for p in prompts]

    def soft_tokens(self, steps: int | str) -> int:
        """Soft tokens a text runs through the model besides its prompt, at most (for batch costs)."""
        settings = self.embed_settings(steps)
        return settings.steps if settings.rules.uses_steps else 0

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens per text (no special tokens), with the model's tokenizer."""
        if not texts:
            return []
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def chat_prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """Tokens of a conversation exactly as generation formats it (chat template + generation prompt)."""
        from ..generation.chat import chat_prompt_ids

        try:
            return len(chat_prompt_ids(self.tokenizer, messages, self.model.prompt_format))
        except (TypeError, ValueError) as exc:
            raise APIError(422, f"cannot format the conversation: {exc}", param="messages") from exc

    def embedding_prompts(
        self, texts: list[str], instruction: str, *, max_length: int = 1 << 30
    ) -> list[EncodedPrompt]:
        """Each text's prompt exactly as the encoder builds it (uncut unless ``max_length`` is given), with
        the event loop's tokenizer."""
        fmt = self.embed_settings(self.settings.default_steps).prompt_format
        return encode_prompts(self.tokenizer, texts, instruction=instruction, prompt_format=fmt, max_length=max_length)

    def embedding_prompt_lengths(self, texts: list[str], instruction: str) -> tuple[list[int], list[int]]:
        """``(prompt tokens, text tokens)`` per text, exactly as the encoder will build the prompts."""
        prompts = self.embedding_prompts(texts, instruction)
        return [len(p.ids) for p in prompts], [p.text_end - p.text_start for p in prompts]

    def cut_prompts(self, texts: list[str], prompts: list[EncodedPrompt], instruction: str) -> list[EncodedPrompt]:
        """The prompts the encoder makes with ``max_input_tokens``: those that fit as they are, longer ones
        tokenized again with the limit (their text cut from the end, as ``encode`` cuts it). A prompt whose
        instruction and template alone are too long cannot be cut to fit: it stays as it is (and gets 413)."""
        limit = self.settings.max_input_tokens
        long = [i for i, p in enumerate(prompts) if len(p.ids) > limit > len(p.ids) - (p.text_end - p.text_start)]
        if not long:
            return prompts
        cut = list(prompts)
        cut_ones = self.embedding_prompts([texts[i] for i in long], instruction, max_length=limit)
        for i, prompt in zip(long, cut_ones, strict=True):
            cut[i] = prompt
        return cut

    def check_steps(self, steps: int | str | None, field: str = "steps") -> int | str:
        """The request's steps (a number, or ``"auto"``: adaptive, at most ``max_steps``), or the
        default; 422 above ``max_steps``."""
        if steps is None:
            return self.settings.default_steps
        if steps == "auto":
            return steps
        if steps > self.settings.max_steps:
            raise APIError(
                422, f"{field}={steps} exceeds this server's max_steps={self.settings.max_steps}", param=field
            )
        return steps

    def check_sizes(self, lengths: list[int], *, field: str, what: str) -> None:
        """413 when there are too many items, one is too long, or all together are too many tokens."""
        s = self.settings
        if len(lengths) > s.max_inputs:
            raise APIError(
                413,
                f"{len(lengths)} {what} in one request; this server takes at most {s.max_inputs} (max_inputs)",
                param=field,
                code="too_many_inputs",
            )
        for i, n in enumerate(lengths):
            if n > s.max_input_tokens:
                raise APIError(
                    413,
                    f"{field}[{i}] is {n} tokens long (with instruction and prompt template); this server takes "
                    f"at most {s.max_input_tokens} per input (max_input_tokens)",
                    param=f"{field}.{i}",
                    code="too_many_tokens",
                )
        self.check_request_tokens(sum(lengths), field=field)

    def check_request_tokens(self, total: int, *, field: str) -> None:
        """413 when one request holds more than ``max_request_tokens`` tokens."""
        limit = self.settings.max_request_tokens
        if total > limit:
            raise APIError(
                413,
                f"the request has {total} tokens in all; this server takes at most {limit} "
                "per request (max_request_tokens)",
                param=field,
                code="too_many_tokens",
            )


def get_state(request: Request) -> ServingState:
    """FastAPI dependency: the :class:`ServingState` of the app serving this request."""
    return request.app.state.genembed
