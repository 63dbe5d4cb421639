"""Run the app with uvicorn: in the foreground (``genembed serve``) or in a background thread (tests,
notebooks, benchmarks)."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["is_loopback", "run_server", "running_server"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _config(app: Any, host: str, port: int, graceful_timeout: float | None, log_level: str) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=graceful_timeout,
        lifespan="on",
    )


def run_server(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    graceful_timeout: float | None = 30.0,
    log_level: str = "info",
) -> None:
    """Serve until SIGINT/SIGTERM; then stop accepting, finish accepted requests (up to
    ``graceful_timeout`` seconds) and stop. ``port`` None: :attr:`ServeSettings.port`."""
    import uvicorn

    from .settings import ServeSettings

    port = ServeSettings.port if port is None else port
    uvicorn.Server(_config(app, host, port, graceful_timeout, log_level)).run()


@contextmanager
def running_server(
    app: Any, *, host: str = "127.0.0.1", graceful_timeout: float | None = 30.0, log_level: str = "warning"
) -> Iterator[tuple[str, Any]]:
    """Serve ``app`` on a free port in a background thread.

    Yields:
        ``(base_url, server)``; ``server.should_exit = True`` starts a graceful shutdown, which the
        context also does on exit (and waits for).

    Raises:
        RuntimeError: the server did not start within 30 s.
    """
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(_config(app, host, port, graceful_timeout, log_level))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("uvicorn did not start (see its log above)")
        time.sleep(0.01)
    url_host = f"[{host}]" if ":" in host else host
    try:
        yield f"http://{url_host}:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
