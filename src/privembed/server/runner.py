"""Run the server: under uvicorn in the foreground (``privembed serve``) or in a thread (tests).

:func:`running_server` starts uvicorn on a loopback socket in a background thread and stops it
gracefully on exit -- what the tests and ``benchmarks/bench_server.py`` use, and a convenient
way to put a privacy proxy in front of application tests.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

__all__ = ["RunningServer", "running_server", "serve_forever", "uvicorn_config"]


class _Server(uvicorn.Server):
    """uvicorn's server, signalling (for other threads) when it is up and when it stops."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        #: set when the startup has finished, or failed
        self.ready = threading.Event()
        #: set when the shutdown begins: no new connections, in-flight requests finish
        self.stopping = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets=sockets)


def uvicorn_config(app: Any, *, host: str, port: int, settings: Any, log_config: Any) -> Any:
    """A ``uvicorn.Config`` with the server's settings (proxy headers, limits, shutdown)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        ws="none",
        log_config=log_config,
        access_log=False,
        server_header=False,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
        limit_concurrency=settings.max_connections,
        timeout_graceful_shutdown=max(1, round(settings.graceful_shutdown_s)),
    )


def serve_forever(app: Any, *, host: str, port: int) -> None:
    """Run ``app`` under uvicorn until SIGINT/SIGTERM (finishing in-flight requests)."""
    from .logs import log_config

    settings = app.state.config.server
    cfg = uvicorn_config(
        app, host=host, port=port, settings=settings, log_config=log_config(settings.log_level)
    )
    uvicorn.Server(cfg).run()


@dataclass
class RunningServer:
    """A server running in a background thread."""

    url: str
    server: Any
    thread: threading.Thread

    @property
    def stopping(self) -> threading.Event:
        """Set once the server has begun to stop (it accepts no new connections)."""
        event: threading.Event = self.server.stopping
        return event

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``) to give a client."""
        return self.url + "/v1"

    def stop(self, timeout: float = 60.0) -> None:
        """Stop accepting, finish in-flight requests, run the shutdown, join the thread."""
        self.server.should_exit = True
        self.thread.join(timeout)


@contextlib.contextmanager
def running_server(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 300.0
) -> Iterator[RunningServer]:
    """Run ``app`` under uvicorn in a thread on ``host:port`` (0: a free port) until exit.

    Raises
    ------
    RuntimeError
        The server did not start (the application's startup error is chained).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    settings = app.state.config.server
    cfg = uvicorn_config(app, host=host, port=bound, settings=settings, log_config=None)
    server = _Server(cfg)

    def run() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            server.ready.set()  # a failure before the startup ends the wait too

    thread = threading.Thread(target=run, name="privembed-server", daemon=True)
    thread.start()
    if not server.ready.wait(start_timeout) or not server.started:
        server.should_exit = True
        thread.join(10)
        sock.close()
        cause = getattr(app.state, "startup_error", None)
        raise RuntimeError(f"the server did not start: {cause!r}") from cause
    handle = RunningServer(f"http://{host}:{bound}", server, thread)
    try:
        yield handle
    finally:
        handle.stop()
        sock.close()
