"""``POST /v1/chat/completions`` in the OpenAI format, streamed as server-sent events or whole.

Generation advances one piece at a time on the model thread, so embedding batches interleave with
long generations instead of waiting for them. Usage counts use the model's tokenizer:
``prompt_tokens`` are the tokens of the conversation as generation formats it, ``completion_tokens``
those of the reply's text tokenized again (``finish_reason`` is ``"length"`` when that reaches
``max_tokens``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from ..generation.sampling import SamplingOptions
from .errors import APIError, error_body, error_responses
from .schemas import (
    DECODING_FIELDS,
    AssistantMessage,
    ChatChoice,
    ChatChunk,
    ChatChunkChoice,
    ChatCompletion,
    ChatRequest,
    ChatUsage,
    Delta,
)
from .state import ServingState, get_state

__all__ = ["router", "to_messages"]

router = APIRouter()
_END = object()


def to_messages(body: ChatRequest) -> list[dict[str, str]]:
    """OpenAI messages -> ``[{"role", "content"}]`` for the chat template (``developer`` acts as ``system``)."""
    messages = []
    for m in body.messages:
        if m.content is None:
            content = ""
        elif isinstance(m.content, str):
            content = m.content
        else:
            content = "\n".join(part.text for part in m.content)
        messages.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    return messages


class _Generation:
    """One request's generation: settings checked up front, pieces pulled through the model thread."""

    def __init__(self, body: ChatRequest, state: ServingState):
        s = state.settings
        self.state = state
        self.messages = to_messages(body)
        requested = body.max_completion_tokens or body.max_tokens
        if requested is not None and requested > s.max_new_tokens:
            field = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
            raise APIError(
                413,
                f"{field}={requested} exceeds this server's limit of {s.max_new_tokens} (max_new_tokens)",
                param=field,
                code="too_many_tokens",
            )
        self.max_tokens = requested or s.default_max_new_tokens
        self.prompt_tokens = state.chat_prompt_tokens(self.messages)
        context = getattr(state.model.backbone.model.config, "max_position_embeddings", None) or 1 << 30
        limit = min(s.max_prompt_tokens, context - 1)
        if self.prompt_tokens > limit:
            raise APIError(
                413,
                f"the conversation is {self.prompt_tokens} tokens long; this server takes at most {limit} "
                f"(max_prompt_tokens={s.max_prompt_tokens}, model context {context})",
                param="messages",
                code="too_many_tokens",
            )
        given = {name: getattr(body, name) for name in DECODING_FIELDS if getattr(body, name) is not None}
        self.sampling = SamplingOptions.build(max_new_tokens=self.max_tokens, **given)  # the schema checked them
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.text = ""

    async def pieces(self) -> AsyncIterator[str]:
        """Generated text pieces; the model's iterator is closed on the model thread however this ends."""
        worker, model = self.state.worker, self.state.model
        stream = await worker.run(lambda: iter(model.generate(self.messages, stream=True, sampling=self.sampling)))
        try:
            while True:
                piece = await worker.run(next, stream, _END)
                if piece is _END:
                    return
                self.text += piece
                yield piece
        finally:  # also on client disconnect; no await here, the task may be cancelled
            if hasattr(stream, "close"):
                worker.submit(stream.close)

    def usage(self) -> tuple[ChatUsage, str]:
        completion = self.state.count_tokens([self.text])[0] if self.text else 0
        finish = "length" if completion >= self.max_tokens else "stop"
        total = self.prompt_tokens + completion
        self.state.metrics.count_tokens("chat", "prompt", self.prompt_tokens)
        self.state.metrics.count_tokens("chat", "completion", completion)
        return ChatUsage(prompt_tokens=self.prompt_tokens, completion_tokens=completion, total_tokens=total), finish


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    summary="Chat with the served model (OpenAI format; stream=true for server-sent events)",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE chunks with stream=true"},
        **error_responses(400, 413, 422, 429),
    },
)
async def chat_completions(body: ChatRequest, state: ServingState = Depends(get_state)) -> Any:
    """Answer a conversation; with ``stream: true`` send ``chat.completion.chunk`` events then ``[DONE]``."""
    gen = _Generation(body, state)
    state.worker.check_capacity()
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _sse(gen, state, include_usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    with state.worker.admit():
        async for _ in gen.pieces():
            pass
    usage, finish = gen.usage()
    choice = ChatChoice(message=AssistantMessage(content=gen.text), finish_reason=finish)
    return ChatCompletion(id=gen.id, created=gen.created, model=state.model_id, choices=[choice], usage=usage)


def _event(payload: Any) -> str:
    data = payload.model_dump(mode="json") if hasattr(payload, "model_dump") else payload
    for choice in data.get("choices", []):  # OpenAI sends only the delta fields that are set
        choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _sse(gen: _Generation, state: ServingState, include_usage: bool) -> AsyncIterator[str]:
    """SSE chunks: role, content pieces, a finish chunk (with usage unless a usage chunk follows), [DONE]."""

    def chunk(delta: Delta, finish: str | None = None, usage: ChatUsage | None = None, choices: bool = True) -> str:
        choice = [ChatChunkChoice(delta=delta, finish_reason=finish)] if choices else []
        return _event(ChatChunk(id=gen.id, created=gen.created, model=state.model_id, choices=choice, usage=usage))

    with state.worker.admit():
        yield chunk(Delta(role="assistant", content=""))
        try:
            async for piece in gen.pieces():
                if piece:
                    yield chunk(Delta(content=piece))
        except Exception as exc:  # headers are sent: report in-band, as OpenAI does
            yield _event(error_body(500, f"generation failed: {type(exc).__name__}: {exc}", code="internal_error"))
            yield "data: [DONE]\n\n"
            return
        usage, finish = gen.usage()
        yield chunk(Delta(), finish=finish, usage=None if include_usage else usage)
        if include_usage:
            yield chunk(Delta(), usage=usage, choices=False)
        yield "data: [DONE]\n\n"
