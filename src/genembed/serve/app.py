"""The FastAPI app: one loaded model serving embeddings, chat, reranking and a small page at ``/``.

>>> import genembed
>>> from genembed.serve import ServeSettings, create_app
>>> app = create_app(genembed.load(), ServeSettings(api_key="secret"))   # run with uvicorn
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from . import chat, embeddings, rerank, soft_tokens
from .batcher import BatcherClosedError
from .errors import APIError, error_body, install_error_handlers
from .schemas import Health, ModelCard, ModelList
from .settings import ServeSettings
from .state import ServingState, get_state
from .worker import QueueFullError

__all__ = ["create_app"]

_bearer = HTTPBearer(auto_error=False, description="The server's --api-key, when it has one.")


def _static_dir() -> str:
    return str(resources.files("genembed.serve").joinpath("static"))


async def require_api_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> None:
    """401 unless the request carries ``Authorization: Bearer <api key>`` (when the server has a key)."""
    key = get_state(request).settings.api_key
    if key is None:
        return
    if credentials is None:
        raise APIError(401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
    if not secrets.compare_digest(credentials.credentials.encode(), key.encode()):
        raise APIError(401, "incorrect API key", code="invalid_api_key")


def create_app(model: Any, settings: ServeSettings | None = None) -> FastAPI:
    """Build the app for a loaded model.

    Args:
        model: a :class:`~genembed.GenerativeEmbedder`; it must not be used elsewhere while served
            (the server runs every forward pass on its own model thread).
        settings: limits, batching and the API key; defaults to :class:`ServeSettings()`.

    Returns:
        A FastAPI app. Its lifespan starts the batcher; on shutdown it finishes every accepted request.
    """
    from genembed import __version__

    state = ServingState(model, settings or ServeSettings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(
        title="genembed",
        version=__version__,
        summary="One generative model serving embeddings (OpenAI), chat (OpenAI) and reranking (Cohere/Jina).",
        lifespan=lifespan,
    )
    app.state.genembed = state
    install_error_handlers(app)

    @app.exception_handler(QueueFullError)
    async def _queue_full(request: Request, exc: QueueFullError) -> JSONResponse:
        body = error_body(429, f"server busy: {exc}; retry later", code="queue_full")
        return JSONResponse(body, status_code=429, headers={"Retry-After": "1"})

    @app.exception_handler(BatcherClosedError)
    async def _closing(request: Request, exc: BatcherClosedError) -> JSONResponse:
        return JSONResponse(error_body(503, str(exc), code="shutting_down"), status_code=503)

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])
    for module in (embeddings, chat, rerank, soft_tokens):
        v1.include_router(module.router)

    @v1.get("/models", response_model=ModelList, summary="The served model (OpenAI format)")
    async def list_models() -> ModelList:
        return ModelList(data=[ModelCard(id=state.model_id, created=state.created)])

    @v1.get("/models/{model_id:path}", response_model=ModelCard, responses={404: {}}, summary="One model")
    async def get_model(model_id: str) -> ModelCard:
        if model_id != state.model_id:
            raise APIError(404, f"model {model_id!r} is not served here; this server serves {state.model_id!r}")
        return ModelCard(id=state.model_id, created=state.created)

    app.include_router(v1)

    @app.get("/health", response_model=Health, summary="Liveness, queue depth and batching counters")
    async def health() -> Health:
        batcher = state.batcher
        return Health(
            status="draining" if batcher is not None and batcher.closing else "ok",
            model=state.model_id,
            queued_embedding_requests=batcher.queued if batcher else 0,
            active_generation_requests=state.worker.active,
            batches=batcher.batches if batcher else 0,
            batched_requests=batcher.batched_requests if batcher else 0,
            largest_batch=batcher.largest_batch if batcher else 0,
        )

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(f"{_static_dir()}/index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=_static_dir()), name="static")
    return app
