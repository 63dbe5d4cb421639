"""What every route shares: the model, its worker thread, the embedding batcher, a token counter,
the named instructions and the metrics."""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
from fastapi import Request

from ..encoders.centering import calibration_texts, center_cache, center_key, instruction_center
from ..encoders.prompts import EncodedPrompt, encode_prompts
from .batcher import EmbeddingBatcher
from .errors import APIError
from .instructions import named_instructions
from .metrics import ServeMetrics
from .settings import ServeSettings
from .token_input import TokenDecoder
from .worker import ModelWorker

__all__ = ["ServingState", "get_state"]


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
        # The model thread tokenizes with the model's tokenizer; a fast tokenizer must not be used by
        # two threads at once, so the event loop counts tokens with its own copy.
        self.tokenizer = copy.deepcopy(model.backbone.tokenizer)
        self.instructions = named_instructions(model, settings.instructions)
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

    async def close(self) -> None:
        """Finish accepted requests, then stop the model thread."""
        if self.batcher is not None:
            await self.batcher.close()
        self.worker.shutdown()

    def warm_up(self) -> int:
        """Make the first request as fast as the next ones; runs on the model thread before it.

        With a centering model, loads or computes the centers of the named instructions for requests
        that leave the settings at their defaults, and keeps them for the server's life (the cache of
        other instructions' centers cannot push them out). Then embeds one text, which pays the
        one-off costs of a process's first forward pass (about a second on a CPU).

        Returns:
            How many centers had to be computed (none when they are stored with the model).
        """
        s = self.settings
        cache = center_cache(self.model.backbone)
        before = cache.computed
        if self.model.center:
            embed_settings = self.model.embed_settings(
                method=s.method, steps=s.default_steps, max_length=s.max_input_tokens, batch_size=s.encode_batch_size
            )
            for instruction in dict.fromkeys(self.instructions.values()):
                cache.keep(
                    center_key(embed_settings, instruction),
                    instruction_center(self.model.backbone, embed_settings, instruction),
                )
        text = calibration_texts()[0]
        (prompt,) = self.embedding_prompts([text], "")  # no request runs yet: the tokenizer is free
        if prompt.text_start + len(prompt.ids) - prompt.text_end < s.max_input_tokens:  # else every request gets 413
            self._encode(("", s.default_steps), [(text, self.cut_prompts([text], [prompt], "")[0])])
        return cache.computed - before

    def _encode(self, key: tuple[str, int], items: list[tuple[str, EncodedPrompt]]) -> np.ndarray:
        """Embed ``(text, prompt)`` items on the model thread; the prompts were built on the event loop
        (:meth:`embedding_prompts`, cut by :meth:`cut_prompts`), so no text is tokenized twice."""
        instruction, steps = key
        s = self.settings
        named = instruction in self.instructions.values()
        return self.model.encode(
            [text for text, _ in items],
            prompts=[prompt for _, prompt in items],
            instruction=instruction,
            steps=max(steps, 1),
            method=s.method,
            prompt_format=s.prompt_format,
            batch_size=s.encode_batch_size,
            max_length=s.max_input_tokens,
            show_progress_bar=False,
            center=False if s.center_named_only and not named else None,
        )

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
        fmt = self.model.prompt_format_for(self.settings.method, self.settings.prompt_format)
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

    def check_steps(self, steps: int | None, field: str = "steps") -> int:
        """The request's steps, or the default; 422 above ``max_steps``."""
        if steps is None:
            return self.settings.default_steps
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
