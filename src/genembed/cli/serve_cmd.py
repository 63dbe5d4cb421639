"""``genembed serve``: one model over HTTP for embeddings (OpenAI), chat (OpenAI) and reranking (Cohere/Jina)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from genembed.encoders.methods import DEFAULT_METHOD, DEFAULT_STEPS

from ._common import (
    AdapterOpt,
    AsPublishedOpt,
    CenterOpt,
    DeviceOpt,
    DtypeOpt,
    GeneratorOpt,
    MethodOpt,
    ModelOpt,
    PromptFormatOpt,
    StepsOpt,
    fail,
    load_model,
    say_generation_weights,
)

_LIMITS = "Limits and batching"


def _default(name: str) -> Any:
    """The default of a ServeSettings field, read where it is declared (cheap: the settings module imports
    neither torch nor fastapi, so --help stays fast)."""
    from genembed.serve.settings import ServeSettings

    return getattr(ServeSettings, name)


def _limit(name: str, help: str, *, min: int = 1, option: str | None = None) -> Any:
    """``--NAME`` (or ``option``), a whole-number setting of ServeSettings, under "Limits and batching" in
    --help; None (not given) keeps the settings' default, which the help states."""
    return typer.Option(
        option or f"--{name.replace('_', '-')}",
        min=min,
        help=f"{help} (default {_default(name)})",
        show_default=False,
        rich_help_panel=_LIMITS,
    )


def serve(
    model: ModelOpt = None,
    adapter: AdapterOpt = None,
    as_published: AsPublishedOpt = None,
    generator: GeneratorOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    center: CenterOpt = None,
    host: Annotated[str, typer.Option("--host", help="address to bind; loopback unless you mean to expose it")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "-p",
            min=0,
            max=65535,
            help=f"port to listen on (0: any free one; default {_default('port')})",
            show_default=False,
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="GENEMBED_API_KEY", help="require 'Authorization: Bearer KEY' on /v1/*"),
    ] = None,
    model_id: Annotated[str | None, typer.Option("--model-id", help="model name in responses")] = None,
    method: MethodOpt = None,
    steps: StepsOpt = None,
    prompt_format: PromptFormatOpt = None,
    max_steps: Annotated[int | None, _limit("max_steps", "highest steps a request may ask for")] = None,
    max_inputs: Annotated[
        int | None, _limit("max_inputs", "texts per embeddings request / documents per rerank")
    ] = None,
    max_length: Annotated[
        int | None,
        _limit(
            "max_input_tokens",
            "tokens per prompt (text + instruction + template): a longer input is refused (413) unless the API "
            "cuts it (Cohere truncate, rerank); max_input_tokens in /info and errors",
            option="--max-length",
        ),
    ] = None,
    max_request_tokens: Annotated[int | None, _limit("max_request_tokens", "prompt tokens per request")] = None,
    max_batch_tokens: Annotated[int | None, _limit("max_batch_tokens", "micro-batch token budget")] = None,
    max_batch_requests: Annotated[
        int | None, _limit("max_batch_requests", "requests per micro-batch (1 = no batching)")
    ] = None,
    max_queue: Annotated[int | None, _limit("max_queue", "waiting requests before answering 429")] = None,
    max_new_tokens: Annotated[
        int | None, _limit("max_new_tokens", "chat: the most tokens per reply a request may ask for (max_tokens)")
    ] = None,
    max_prompt_tokens: Annotated[
        int | None, _limit("max_prompt_tokens", "chat: tokens of the formatted conversation")
    ] = None,
    max_centering: Annotated[
        int | None, _limit("max_centering", "new instructions centred at once (their calibration batches)")
    ] = None,
    max_centering_queue: Annotated[
        int | None,
        _limit("max_centering_queue", "new instructions waiting to be centred before answering 429", min=0),
    ] = None,
    max_centering_wait: Annotated[
        float | None,
        _limit(
            "max_centering_wait",
            "seconds a request waits for a new instruction's centre; expected later: 429 + Retry-After at once",
        ),
    ] = None,
    graceful_timeout: Annotated[
        float, typer.Option(min=0, help="seconds to finish accepted requests on shutdown")
    ] = 30.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    instructions: Annotated[
        Path | None,
        typer.Option(
            "--instructions",
            help="JSON file of named instructions {name: instruction} for prompt_name / input_type / task "
            "(over the defaults: query, document, classification, clustering, text-matching)",
        ),
    ] = None,
    token_encoding: Annotated[
        str | None,
        typer.Option(
            "--token-encoding",
            help="token-array inputs are ids of this tiktoken encoding (cl100k_base: LangChain's OpenAIEmbeddings "
            "defaults); default: the model's tokenizer",
        ),
    ] = None,
    rerank_scoring: Annotated[
        str | None,
        typer.Option(
            "--rerank-scoring",
            help=f"rerank scoring by default: query_likelihood or yes_no (default {_default('rerank_scoring')})",
            show_default=False,
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", help="allow browser calls from this origin (repeatable; '*' for any)"),
    ] = None,
    center_named_only: Annotated[
        bool,
        typer.Option(
            "--center-named-only",
            help="with centering: center only the named instructions (ready at start-up); a request's own "
            "instruction is embedded uncentered",
        ),
    ] = False,
    center_cache_size: Annotated[
        int | None,
        typer.Option(
            "--center-cache-size",
            min=0,
            help="centers of other instructions kept in memory (default: the model's, DEFAULT_CACHE_SIZE of "
            "genembed.encoders.centering)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve one model: POST /v1/embeddings (OpenAI), /v1/embed and /v2/embed (Cohere), /v1/chat/completions,
    /v1/rerank, /v2/rerank; GET /info, /health, /metrics; a page at /.

    Options left unset take the defaults of genembed.serve.ServeSettings (the help states them)."""
    _check_port(host, _default("port") if port is None else port)  # first: a busy port fails in a second
    from genembed.serve import ServeSettings, create_app, run_server
    from genembed.serve.instructions import load_instructions
    from genembed.serve.server import is_loopback

    given = {  # None: the settings' default
        "port": port,
        "max_steps": max_steps,
        "max_inputs": max_inputs,
        "max_input_tokens": max_length,
        "max_request_tokens": max_request_tokens,
        "max_batch_tokens": max_batch_tokens,
        "max_batch_requests": max_batch_requests,
        "max_queue": max_queue,
        "max_new_tokens": max_new_tokens,
        "max_prompt_tokens": max_prompt_tokens,
        "max_centering": max_centering,
        "max_centering_queue": max_centering_queue,
        "max_centering_wait": max_centering_wait,
        "rerank_scoring": rerank_scoring,
        "center_cache_size": center_cache_size,
    }
    if max_new_tokens is not None:  # a lower cap lowers the default reply length with it
        given["default_max_new_tokens"] = min(ServeSettings.default_max_new_tokens, max_new_tokens)
    try:
        settings = ServeSettings(
            model_id=model_id,
            api_key=api_key,
            method=method or DEFAULT_METHOD,  # checked here; a saved model's own method replaces it once loaded
            prompt_format=prompt_format,
            default_steps=steps or DEFAULT_STEPS,
            instructions=load_instructions(instructions) if instructions is not None else {},
            token_encoding=token_encoding,
            cors_origins=tuple(cors_origin or ()),
            center_named_only=center_named_only,
            **{name: value for name, value in given.items() if value is not None},
        )
    except ValueError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    if not is_loopback(host) and api_key is None:
        typer.secho(
            f"warning: serving on {host} without --api-key: anyone who can reach this address can use the model",
            fg="yellow",
            err=True,
        )
    loaded = load_model(model, adapter, dtype, center, device, generator, as_published)
    try:  # a model saved with its settings (model.save) serves its own method and K unless told otherwise
        settings = replace(settings, method=method or loaded.method, default_steps=steps or loaded.steps)
    except ValueError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    try:
        app = create_app(loaded, settings)
    except ValueError as exc:  # e.g. a --token-encoding tiktoken cannot load
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    shown = f"[{host}]" if ":" in host else host
    typer.echo(
        f"serving {settings.model_id or loaded.name} on http://{shown}:{settings.port} "
        f"(device {loaded.device}; page at /, API docs at /docs)"
    )
    say_generation_weights(loaded)
    run_server(app, host=host, port=settings.port, graceful_timeout=graceful_timeout, log_level=log_level)


def _check_port(host: str, port: int) -> None:
    """Fail now, naming the port and ``--port``, when ``host:port`` cannot be bound (in use, not allowed)."""
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        fail(f"--host {host}: not an address this machine can listen on ({exc.strerror})")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            sock.bind(address)
        except OSError as exc:
            fail(
                f"cannot listen on port {port} of {host} ({exc.strerror}): another server may be using it; "
                "stop it or choose another port with --port"
            )
