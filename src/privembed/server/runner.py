"""Run the server: under uvicorn in the foreground (``privembed serve``) or in a thread (tests).

:func:`running_server` starts uvicorn on a loopback socket in a background thread and stops it
gracefully on exit -- what the tests and ``benchmarks/bench_server.py`` use, and a convenient
way to put a privacy proxy in front of application tests.

Binding. The address checked against the loopback-only rule for unauthenticated access is the
one the server actually binds (:func:`privembed.server.config.check_bind`), whatever set it:
the configuration, ``--host``, or the caller of :func:`serve_forever` / :func:`running_server`
(where the socket's own address is checked too). Requests without a key are also served only
to loopback clients (:mod:`.app`), whatever bound the socket.

Stopping. SIGTERM or SIGINT (or :meth:`RunningServer.stop`) starts a *drain*: the listening
socket stays open and every new request is answered 503 ``shutting_down`` (``Retry-After``,
``Connection: close``); admitted work may finish for up to ``graceful_shutdown_s``; what is
still waiting then is answered 503 too (:meth:`privembed.server.service.Service.drain`). Only
then does uvicorn stop listening, close the connections (waiting at most
:data:`CLOSE_MARGIN_S` for responses to be written) and run the application's shutdown. A
second SIGINT forces an immediate exit. :func:`serve_forever` returns normally (exit status 0)
after a clean shutdown and raises ``SystemExit(1)`` after a forced or failed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn

from .config import check_bind

__all__ = [
    "CLOSE_MARGIN_S",
    "RunningServer",
    "check_bind",
    "running_server",
    "serve_forever",
    "uvicorn_config",
]

#: seconds uvicorn waits for connections to close after the drain (every request has been
#: answered by then: this covers writing the last responses)
CLOSE_MARGIN_S = 5


class _Server(uvicorn.Server):
    """uvicorn's server with privembed's drain; it signals (for other threads) when it is up
    and when it begins to stop, and says whether its shutdown was clean."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        #: set when the startup has finished, or failed
        self.ready = threading.Event()
        #: set when the drain begins (new requests are answered 503 from then on)
        self.stopping = threading.Event()
        self._drain_requested = False
        self._drain: asyncio.Task[None] | None = None
        self._closed_in_time = False
        self.refused_at_drain = 0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: drain, then stop (never re-raised: a clean stop exits 0). A second
        SIGINT forces the exit."""
        if self._drain_requested and sig == signal.SIGINT:
            self.force_exit = True
            self.should_exit = True
            return
        self._drain_requested = True

    def request_drain(self) -> None:
        """Begin the drain from another thread (what SIGTERM does)."""
        self._drain_requested = True

    async def on_tick(self, counter: int) -> bool:
        if self._drain_requested and self._drain is None:
            self.stopping.set()
            self._drain = asyncio.create_task(self._drain_app())
        if self._drain is not None and self._drain.done():
            self.should_exit = True
        return await super().on_tick(counter)

    async def _drain_app(self) -> None:
        state = getattr(self.config.app.state, "privembed", None)
        if state is None:
            return
        state.draining = True
        svc = state.service
        if svc is not None:
            self.refused_at_drain = await svc.drain(state.cfg.server.graceful_shutdown_s)

    async def _wait_tasks_to_complete(self) -> None:
        await super()._wait_tasks_to_complete()
        self._closed_in_time = True  # not reached when uvicorn's wait timed out

    @property
    def clean(self) -> bool:
        """Whether the server started, drained and shut down without forcing anything."""
        lifespan = getattr(self, "lifespan", None)
        return (
            self.started
            and not self.force_exit
            and self._closed_in_time
            and not getattr(lifespan, "shutdown_failed", False)
        )


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
        timeout_graceful_shutdown=CLOSE_MARGIN_S,  # after the drain (graceful_shutdown_s)
    )


def serve_forever(app: Any, *, host: str, port: int) -> None:
    """Run ``app`` under uvicorn until SIGINT/SIGTERM, then drain and stop (module docstring).

    Raises
    ------
    ConfigError
        ``allow_unauthenticated`` with a ``host`` that is not loopback (nothing is bound).
    SystemExit
        Status 1 after a forced or failed shutdown (a clean one returns: status 0).
    """
    from .logs import log_config

    config = app.state.config
    check_bind(config.server, host, source=config.source)
    settings = config.server
    cfg = uvicorn_config(
        app, host=host, port=port, settings=settings, log_config=log_config(settings.log_level)
    )
    server = _Server(cfg)
    server.run()
    if not server.clean:
        raise SystemExit(1)


@dataclass
class RunningServer:
    """A server running in a background thread."""

    url: str
    server: Any
    thread: threading.Thread

    @property
    def stopping(self) -> threading.Event:
        """Set once the server has begun to stop (its drain: new requests get 503)."""
        event: threading.Event = self.server.stopping
        return event

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``) to give a client."""
        return self.url + "/v1"

    def stop(self, timeout: float = 60.0) -> None:
        """Drain (as SIGTERM does), run the shutdown, join the thread (at most ``timeout`` s)."""
        self.server.request_drain()
        self.thread.join(timeout)


@contextlib.contextmanager
def running_server(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 300.0
) -> Iterator[RunningServer]:
    """Run ``app`` under uvicorn in a thread on ``host:port`` (0: a free port) until exit.

    Raises
    ------
    ConfigError
        ``allow_unauthenticated`` with a ``host`` that is not loopback.
    RuntimeError
        The server did not start (the application's startup error is chained).
    """
    config = app.state.config
    check_bind(config.server, host, source=config.source)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        check_bind(config.server, sock.getsockname()[0], source=config.source)
    except BaseException:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    settings = config.server
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
