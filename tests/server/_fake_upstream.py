"""A fake OpenAI-compatible embeddings upstream, served on loopback for the proxy's tests.

Its clean vector for a text is a deterministic function of the text (:func:`clean_vector`), so
tests can compare what the proxy returns with what it was given.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import socket
import threading
import unicodedata
from collections.abc import Iterator
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

DIM = 64
UPSTREAM_KEY = "upstream-secret"


def clean_vector(text: str, dim: int = DIM) -> np.ndarray:
    """The fake model: a unit float32 vector seeded by the text's SHA-256."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dim)
    return (v / np.linalg.norm(v)).astype(np.float32)


def fold_variants(text: str) -> str:
    """What a real tokenizer does to many variants of a text (all-MiniLM's uncased tokenizer
    strips accents and drops zero-width characters): the fake model embeds this form when
    ``FakeUpstream(fold=fold_variants)``, so such variants get one clean vector."""
    decomposed = unicodedata.normalize("NFD", text)
    kept = (c for c in decomposed if unicodedata.category(c) not in ("Mn", "Cf"))
    return " ".join("".join(kept).lower().split())


class FakeUpstream:
    """State of one fake upstream: calls seen, a gate that holds calls, a forced failure.

    ``fold`` maps a text to what the fake model embeds (default: the text itself).
    """

    def __init__(self, fold: Any = None) -> None:
        self.fold = fold if fold is not None else (lambda t: t)
        self.calls: list[int] = []  # batch size of each call
        self.fail_status: int | None = None
        self._open = threading.Event()  # cleared: calls wait (a model that is busy)
        self._open.set()
        self._seen = threading.Condition()
        self.app = self._build()

    def hold(self) -> None:
        """Make calls wait until :meth:`release`."""
        self._open.clear()

    def release(self) -> None:
        """Let waiting and later calls go on."""
        self._open.set()

    def wait_for_calls(self, n: int, timeout: float = 60.0) -> bool:
        """Block until ``n`` calls in all have arrived (False: not within ``timeout``)."""
        with self._seen:
            return self._seen.wait_for(lambda: len(self.calls) >= n, timeout)

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/embeddings")
        async def embeddings(request: Request) -> JSONResponse:
            if request.headers.get("authorization") != f"Bearer {UPSTREAM_KEY}":
                return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
            body = await request.json()
            texts = body["input"]
            with self._seen:
                self.calls.append(len(texts))
                self._seen.notify_all()
            if not self._open.is_set():
                await asyncio.get_running_loop().run_in_executor(None, self._open.wait, 60.0)
            if self.fail_status is not None:
                return JSONResponse(
                    {"error": {"message": f"echo {texts[0]}"}}, status_code=self.fail_status
                )
            data: list[dict[str, Any]] = []
            for i, t in enumerate(texts):
                v = clean_vector(self.fold(t))
                emb: Any = (
                    base64.b64encode(v.astype("<f4").tobytes()).decode()
                    if body.get("encoding_format") == "base64"
                    else v.tolist()
                )
                data.append({"object": "embedding", "index": i, "embedding": emb})
            data.reverse()  # the proxy must order by index
            n = sum(len(t.split()) for t in texts)
            return JSONResponse(
                {
                    "object": "list",
                    "data": data,
                    "model": body["model"],
                    "usage": {"prompt_tokens": n, "total_tokens": n},
                }
            )

        return app


class _Server(uvicorn.Server):
    """Sets ``ready`` when its startup has finished."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: Any = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Run any ASGI app on a free loopback port in a thread; yield its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = _Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, ws="none", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert server.ready.wait(60) and server.started, "fake upstream did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
