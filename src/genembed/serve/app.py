"""The FastAPI app: one loaded model serving embeddings (OpenAI, Cohere), chat, reranking, operations routes
(``/health``, ``/metrics``, ``/info``, ``/tokenize``) and a small page at ``/``.

>>> import genembed
>>> from genembed.serve import ServeSettings, create_app
>>> app = create_app(genembed.load(), ServeSettings(api_key="secret"))   # run with uvicorn
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from . import chat, cohere_embed, embeddings, operations, rerank, soft_tokens
from .batcher import BatcherClosedError
from .errors import APIError, error_body, error_responses, install_error_handlers
from .metrics import MetricsMiddleware
from .schemas import ModelCard, ModelList
from .settings import ServeSettings
from .state import ServingState, get_state
from .worker import QueueFullError

__all__ = ["create_app"]

logger = logging.getLogger(__name__)
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
        settings: limits, batching, the API key, named instructions and CORS; defaults to
            :class:`ServeSettings()`.

    Returns:
        A FastAPI app. Its lifespan starts the batcher and warms the model up before the first request
        (with a centering model, loading or computing the centers of the named instructions); on
        shutdown it finishes every accepted request.

    Raises:
        ValueError: ``settings.token_encoding`` cannot be loaded.
    """
    from genembed import __version__

    settings = settings or ServeSettings()
    state = ServingState(model, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        computed = await state.worker.run(state.warm_up)
        if computed:
            logger.info("computed %d centers of named instructions (store them with model.save)", computed)
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(
        title="genembed",
        version=__version__,
        summary="One generative model serving embeddings (OpenAI, Cohere), chat (OpenAI) and reranking (Cohere/Jina).",
        lifespan=lifespan,
    )
    app.state.genembed = state
    install_error_handlers(app)

    @app.exception_handler(QueueFullError)
    async def _queue_full(request: Request, exc: QueueFullError) -> JSONResponse:
        body = error_body(429, f"server busy: {exc}; retry later", code="queue_full")
        retry_after = getattr(exc, "retry_after", 1)  # a centring queue knows how long its work takes
        return JSONResponse(body, status_code=429, headers={"Retry-After": str(retry_after)})

    @app.exception_handler(BatcherClosedError)
    async def _closing(request: Request, exc: BatcherClosedError) -> JSONResponse:
        return JSONResponse(error_body(503, str(exc), code="shutting_down"), status_code=503)

    v1 = APIRouter(prefix="/v1")
    for module in (embeddings, cohere_embed, chat, rerank, soft_tokens):
        v1.include_router(module.router)

    @v1.get("/models", response_model=ModelList, summary="The served model (OpenAI format)")
    async def list_models() -> ModelList:
        return ModelList(data=[ModelCard(id=state.model_id, created=state.created)])

    @v1.get(
        "/models/{model_id:path}", response_model=ModelCard, responses=error_responses(404, 422), summary="One model"
    )
    async def get_model(model_id: str) -> ModelCard:
        if model_id != state.model_id:
            raise APIError(404, f"model {model_id!r} is not served here; this server serves {state.model_id!r}")
        return ModelCard(id=state.model_id, created=state.created)

    v2 = APIRouter(prefix="/v2")
    v2.include_router(rerank.router_v2)
    v2.include_router(cohere_embed.router_v2)
    # with a key, these routes need it and the OpenAPI document says so (bearer scheme, 401); without
    # one they are open and the document declares no security at all
    keyed = settings.api_key is not None
    for router in (v1, v2, operations.keyed):
        app.include_router(
            router,
            dependencies=[Depends(require_api_key)] if keyed else None,
            responses=error_responses(401) if keyed else None,
        )
    app.include_router(operations.public)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(f"{_static_dir()}/index.html", media_type="text/html")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:  # browsers ask for it: no icon, and no 404 in the log
        return Response(status_code=204)

    app.mount("/static", StaticFiles(directory=_static_dir()), name="static")
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    if settings.cors_origins:  # outermost, so preflight requests are answered before anything else
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["*"],
            expose_headers=["Retry-After"],
        )
    return app
