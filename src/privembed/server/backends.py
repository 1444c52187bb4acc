"""Embedding backends: where clean vectors come from, before any protection.

* :class:`LocalBackend` -- a sentence-transformers model in this process
  (:class:`privembed.data.embedders.Embedder`; offline all-MiniLM-L6-v2 by default), run on one
  worker thread (the model parallelises internally).
* :class:`UpstreamBackend` -- an OpenAI-compatible ``POST {base_url}/embeddings`` over
  ``httpx``; its API key comes from an environment variable, never from the config file.

Both return float32 rows (one per text, in order) and a token count per text. Errors become
:class:`BackendError` with a message fit for a client: it never quotes the upstream's reply
(which may echo the input).

Upstream retries
----------------
An embeddings call is idempotent, so transient failures are retried: a connection that cannot
be made is first retried once at once by httpx's transport; then connection errors and HTTP
429, 502, 503 and 504 are retried by :meth:`UpstreamBackend.embed` up to ``max_attempts``
attempts in all, after an exponential backoff with jitter (``retry_backoff_s`` x 2^(n-1), at
most :data:`MAX_BACKOFF_S`, times a uniform factor in [0.5, 1]) or the upstream's
``Retry-After``, whichever is longer. No attempt starts once ``retry_deadline_s`` would be
passed: a ``Retry-After`` beyond it ends the retries at once (the client gets 503 with that
``Retry-After``). Timeouts are not retried (a slow upstream is not helped by more load), nor is
any other 4xx or 5xx. When the retries are spent, one error says what the last attempt got.

Examples
--------
>>> _retry_after_s("2"), _retry_after_s("soon"), _retry_after_s(None)
(2.0, None, None)
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core.rng import as_generator
from .config import BackendConfig

__all__ = [
    "MAX_BACKOFF_S",
    "RETRY_STATUSES",
    "Backend",
    "BackendError",
    "LocalBackend",
    "UpstreamBackend",
    "make_backend",
]

#: upstream statuses that are retried (rate limited, bad gateway, unavailable, gateway timeout)
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: longest exponential backoff between two attempts, seconds (a Retry-After may ask for more)
MAX_BACKOFF_S = 8.0


class BackendError(Exception):
    """The backend could not embed a batch (maps to HTTP 502, or 503 when it is overloaded)."""

    def __init__(self, message: str, *, status: int = 502, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class Backend:
    """Interface of an embedding backend."""

    config: BackendConfig
    #: output dimension, once known (after start for local, after the first call for upstream)
    dim: int | None = None

    def __init__(self, config: BackendConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def max_concurrency(self) -> int:
        """Model calls that may run at the same time."""
        return 1

    @property
    def engine(self) -> str:
        """What computes the vectors (``"onnx"``, ``"torch"``, ``"upstream"``), for the logs."""
        return self.config.type

    @property
    def identity(self) -> str:
        """What determines the clean vectors, as keyed noise binds it (after :meth:`start`):
        a hosted model is known by its address, name and dimensions; a local one by a digest
        of the model itself (:class:`LocalBackend`)."""
        return self.config.identity

    async def start(self) -> None:
        """Load the model or open connections."""

    async def close(self) -> None:
        """Release resources."""

    async def embed(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        """Clean embeddings (n, d) float32 and token counts for ``texts``."""
        raise NotImplementedError


class LocalBackend(Backend):
    """An embedding model in-process (:class:`privembed.data.embedders.Embedder`: ONNX Runtime or
    PyTorch, by ``runtime``; L2-normalised float32 outputs), on one worker thread."""

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"privembed-embed-{config.name}")
        self._embedder: Any = None

    @property
    def engine(self) -> str:
        return str(self._embedder.backend) if self._embedder is not None else self.config.runtime

    @property
    def identity(self) -> str:
        """``local|`` and the loaded model's :attr:`~privembed.data.embedders.Embedder.identity`: a
        digest of its weights, tokenizer, pooling and runtime, never the configured path (two
        folders with one name, or a folder changed in place, are other models)."""
        if self._embedder is None:
            raise BackendError("the embedding model is not loaded", status=503)
        return f"local|{self._embedder.identity}"

    def _load(self) -> Any:
        """Build the embedder (on the worker thread, which then runs every model call)."""
        from ..data.embedders import Embedder

        cfg = self.config
        emb = Embedder(
            cfg.model,
            backend=cfg.runtime,
            batch_size=cfg.batch_size,
            device=cfg.device,
            threads=cfg.threads,
        )
        _ = emb.identity  # digested here, on the worker thread, before the first request
        if emb.backend == "torch":
            import torch

            # one thread unless configured: torch's own thread count spins OpenMP threads
            # against the event loop (on 2 loaded cores, 16-44 requests/s at 32 clients against
            # ~150 with one thread, docs/server.md); set on the thread that runs the model
            torch.set_num_threads(cfg.threads if cfg.threads is not None else 1)
        return emb

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._embedder = await loop.run_in_executor(self._executor, self._load)
        self.dim = int(self._embedder.dim)

    async def close(self) -> None:
        self._executor.shutdown(wait=True)

    def _embed_sync(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        X = np.asarray(self._embedder.encode(texts), dtype=np.float32)
        return X, list(self._embedder.count_tokens(texts))

    async def embed(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        if self._embedder is None:
            raise BackendError("the embedding model is not loaded", status=503)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._embed_sync, texts)


def _split_tokens(total: int, texts: list[str]) -> list[int]:
    """Distribute an upstream's batch token count over texts, proportional to length.

    Largest-remainder rounding keeps the sum exact.

    Examples
    --------
    >>> _split_tokens(10, ["aaaa", "a", "aaaaa"])
    [4, 1, 5]
    """
    lens = np.array([max(1, len(t)) for t in texts], dtype=np.float64)
    share = total * lens / lens.sum()
    base = np.floor(share).astype(np.int64)
    rest = int(total - base.sum())
    if rest > 0:
        base[np.argsort(-(share - base), kind="stable")[:rest]] += 1
    return [int(x) for x in base]


def _retry_after_s(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), or ``None``."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


class UpstreamBackend(Backend):
    """An OpenAI-compatible embeddings endpoint (``POST {base_url}/embeddings``).

    Parameters
    ----------
    config : BackendConfig
        ``type = "upstream"``; ``max_attempts``, ``retry_deadline_s`` and ``retry_backoff_s``
        bound the retries (see the module documentation).
    transport : httpx.AsyncBaseTransport, optional
        Instead of the network (tests: ``httpx.MockTransport``); without it, an
        ``httpx.AsyncHTTPTransport`` that retries a failed connection once.
    sleep : async callable(float), optional
        Waits between attempts (default :func:`asyncio.sleep`; tests pass a recorder).
    clock : callable() -> float, optional
        Monotonic seconds for the retry deadline (default :func:`time.monotonic`).
    rng : int, numpy.random.Generator or None
        Randomness of the backoff jitter.
    """

    def __init__(
        self,
        config: BackendConfig,
        *,
        transport: Any = None,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        clock: Callable[[], float] | None = None,
        rng: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(config)
        self._transport = transport
        self._client: Any = None
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self._clock = clock if clock is not None else time.monotonic
        self._rng = as_generator(rng)

    @property
    def max_concurrency(self) -> int:
        return self.config.max_concurrency

    async def start(self) -> None:
        import httpx

        cfg = self.config
        headers = {"Content-Type": "application/json"}
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise RuntimeError(
                    f"backend {cfg.name!r}: environment variable {cfg.api_key_env} "
                    "(the upstream API key) is not set."
                )
            headers["Authorization"] = f"Bearer {key}"
        base = (cfg.base_url or "").rstrip("/") + "/"
        limits = httpx.Limits(max_connections=max(4, cfg.max_concurrency * 2))
        transport = self._transport
        if transport is None:  # connect errors: one immediate new connection, then our loop
            transport = httpx.AsyncHTTPTransport(retries=1, limits=limits, trust_env=False)
        self._client = httpx.AsyncClient(
            base_url=base,
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_s),
            transport=transport,
            trust_env=False,
            follow_redirects=False,
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        cfg = self.config
        base = min(MAX_BACKOFF_S, cfg.retry_backoff_s * 2.0 ** (attempt - 1))
        delay = base * float(self._rng.uniform(0.5, 1.0))
        return delay if retry_after is None else max(delay, retry_after)

    async def _post(self, body: dict[str, Any]) -> Any:
        """The upstream's 200 response, after retrying transient failures."""
        import httpx

        cfg = self.config
        deadline = self._clock() + cfg.retry_deadline_s
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                resp = await self._client.post("embeddings", json=body)
            except httpx.TimeoutException:
                raise BackendError("the upstream embedding service timed out", status=504) from None
            except httpx.TransportError:
                failure = BackendError("the upstream embedding service is unreachable")
            else:
                code = resp.status_code
                if code == 200:
                    return resp
                if code not in RETRY_STATUSES:
                    raise BackendError(f"the upstream embedding service returned HTTP {code}")
                retry_after = _retry_after_s(resp.headers.get("retry-after"))
                if code in (429, 503):
                    failure = BackendError(
                        f"the upstream embedding service is overloaded (HTTP {code})",
                        status=503,
                        retry_after=1.0 if retry_after is None else max(1.0, retry_after),
                    )
                else:
                    failure = BackendError(f"the upstream embedding service returned HTTP {code}")
            delay = self.backoff(attempt, retry_after)
            if attempt >= cfg.max_attempts or self._clock() + delay > deadline:
                n = f"{attempt} attempt{'s' if attempt > 1 else ''}"
                raise BackendError(
                    f"{failure} ({n})", status=failure.status, retry_after=failure.retry_after
                )
            await self._sleep(delay)

    async def embed(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "input": texts,
            "encoding_format": cfg.encoding_format,
        }
        if cfg.dimensions is not None:
            body["dimensions"] = cfg.dimensions
        resp = await self._post(body)
        try:
            X, total = self._parse(resp.json(), len(texts))
        except (ValueError, KeyError, TypeError):
            raise BackendError(
                "the upstream embedding service returned a malformed response"
            ) from None
        if self.dim is None:
            self.dim = X.shape[1]
        elif X.shape[1] != self.dim:
            raise BackendError(
                f"the upstream embedding service changed dimension ({self.dim} -> {X.shape[1]})"
            )
        if total is None:  # no usage reported: about 4 characters per token
            return X, [max(1, -(-len(t) // 4)) for t in texts]
        return X, _split_tokens(total, texts)

    def _parse(self, payload: Any, n: int) -> tuple[NDArray[np.float32], int | None]:
        data = payload["data"]
        if not isinstance(data, list) or len(data) != n:
            raise ValueError("wrong number of embeddings")
        rows: list[NDArray[np.float32] | None] = [None] * n
        for item in data:
            idx = item.get("index")
            if not isinstance(idx, int) or not 0 <= idx < n or rows[idx] is not None:
                raise ValueError("bad index")
            emb = item["embedding"]
            if isinstance(emb, str):
                raw = base64.b64decode(emb, validate=True)
                if len(raw) % 4:
                    raise ValueError("bad base64 length")
                rows[idx] = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            elif isinstance(emb, list):
                rows[idx] = np.asarray(emb, dtype=np.float32)
            else:
                raise ValueError("bad embedding")
        first = rows[0]
        assert first is not None
        if (
            first.ndim != 1
            or first.size == 0
            or any(r is None or r.shape != first.shape for r in rows)
        ):
            raise ValueError("ragged embeddings")
        X = np.stack([r for r in rows if r is not None])
        if not np.isfinite(X).all() or np.any(np.linalg.norm(X, axis=1) == 0):
            raise ValueError("non-finite or zero embeddings")
        usage = payload.get("usage") or {}
        total = usage.get("prompt_tokens", usage.get("total_tokens"))
        if not isinstance(total, int) or isinstance(total, bool) or total < 0:
            return X, None
        return X, total


def make_backend(config: BackendConfig) -> Backend:
    """The backend object for a configuration."""
    if config.type == "local":
        return LocalBackend(config)
    return UpstreamBackend(config)
