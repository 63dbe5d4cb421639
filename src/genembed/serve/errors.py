"""Errors in the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``, for every status.

OpenAI clients read ``error.message`` from any non-2xx body, so every failure, including FastAPI's
own validation errors, unknown routes and unexpected exceptions, is answered in this shape.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["APIError", "error_body", "error_responses", "install_error_handlers"]

logger = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}


_WHEN = {
    400: "The body could not be read (not JSON, or bytes that are not UTF-8).",
    401: "The server has an API key and the request's `Authorization: Bearer` is missing or wrong.",
    404: "No such model.",
    413: "Too many inputs or tokens for this server's limits.",
    422: "The body or a value is invalid (the message and `param` name the field).",
    429: "The queue is full; retry after `Retry-After` seconds.",
    503: "The server is shutting down.",
}
_HEADERS = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}}},
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` declaring these error statuses with the OpenAI error body."""
    from .schemas import ErrorResponse

    return {
        status: {
            "model": ErrorResponse,
            "description": _WHEN[status],
            **({"headers": _HEADERS[status]} if status in _HEADERS else {}),
        }
        for status in statuses
    }


class APIError(Exception):
    """An error answered with ``status`` and an OpenAI-shaped body.

    Args:
        status: HTTP status code.
        message: what went wrong and how to fix it.
        param: the request field at fault, dotted (``"input.3"``), if any.
        code: a short machine-readable code, e.g. ``"too_many_tokens"``.
    """

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The JSON body of an error response (also sent as an SSE event when a stream fails)."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _response(status: int, message: str, *, param: str | None = None, code: str | None = None, headers=None):
    return JSONResponse(error_body(status, message, param=param, code=code), status_code=status, headers=headers)


_SKIP = {"body", "query", "path", "header"}
_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "json-or-python", "is-instance"}


def _location(loc: tuple[Any, ...]) -> str:
    # pydantic tags the branches of a union ("list[...]", "function-after[...]", "str"): not field names
    if loc and loc[0] in _SKIP:  # where the value came from; a field may itself be named "query"
        loc = loc[1:]
    parts = [str(p) for p in loc if not (isinstance(p, str) and _is_tag(p))]
    return ".".join(parts) if parts else "body"


def _is_tag(part: str) -> bool:
    return "[" in part or part in _UNION_TAGS or part.startswith("constrained-") or part[:1].isupper()


def _json_error(errors: list[dict[str, Any]]) -> str | None:
    """The message for a body that is not JSON (FastAPI reports the character offset as the location)."""
    for e in errors:
        if e.get("type") == "json_invalid":
            loc = e.get("loc", ())
            where = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
            reason = (e.get("ctx") or {}).get("error") or e.get("msg", "")
            return f"the request body is not valid JSON{where}: {reason}"
    return None


def _validation_message(errors: list[dict[str, Any]]) -> str:
    located = [(_location(tuple(e.get("loc", ()))), e) for e in errors]
    # a union reports every branch: where one branch had the right type but a bad value, the other
    # branches' "should be a valid list/int/..." about the same field only hide that message
    specific = {where.split(".")[0] for where, e in located if not str(e.get("type", "")).endswith("_type")}
    kept = [
        (w, e) for w, e in located if w.split(".")[0] not in specific or not str(e.get("type", "")).endswith("_type")
    ]
    shown = list(dict.fromkeys(f"{where}: {e.get('msg', 'invalid')}" for where, e in kept))
    more = f" (and {len(shown) - 5} more)" if len(shown) > 5 else ""
    return "invalid request: " + "; ".join(shown[:5]) + more


def install_error_handlers(app: FastAPI) -> None:
    """Answer :class:`APIError`, validation errors, HTTP errors and crashes in the OpenAI shape."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        if exc.status == 429:
            headers = {"Retry-After": "1"}
        return _response(exc.status, exc.message, param=exc.param, code=exc.code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        not_json = _json_error(errors)
        if not_json is not None:
            return _response(400, not_json, param="body", code="invalid_json")
        # the deepest location names the field best (a union reports each branch at its own depth)
        param = max((_location(tuple(e.get("loc", ()))) for e in errors), key=lambda p: p.count("."), default=None)
        return _response(422, _validation_message(errors), param=param, code="invalid_request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        cause = exc.__cause__  # FastAPI raises its "error parsing the body" 400 from the decoding error
        if exc.status_code == 400 and isinstance(cause, UnicodeDecodeError):
            message = (
                f"the request body is not valid UTF-8 JSON: byte 0x{cause.object[cause.start]:02x} at position "
                f"{cause.start} is not UTF-8; send the JSON encoded as UTF-8"
            )
            return _response(400, message, param="body", code="invalid_json")
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; see /docs for the API"
        return _response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return _response(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")
