"""Embedding backends: where clean vectors come from, before any protection.

* :class:`LocalBackend` -- a sentence-transformers model in this process
  (:class:`privembed.embedders.Embedder`; offline all-MiniLM-L6-v2 by default), run on one
  worker thread (the model parallelises internally).
* :class:`UpstreamBackend` -- an OpenAI-compatible ``POST {base_url}/embeddings`` over
  ``httpx``; its API key comes from an environment variable, never from the config file.

Both return float32 rows (one per text, in order) and a token count per text. Errors become
:class:`BackendError` with a message fit for a client: it never quotes the upstream's reply
(which may echo the input).
"""

from __future__ import annotations

import asyncio
import base64
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .config import BackendConfig

__all__ = ["Backend", "BackendError", "LocalBackend", "UpstreamBackend", "make_backend"]


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

    async def start(self) -> None:
        """Load the model or open connections."""

    async def close(self) -> None:
        """Release resources."""

    async def embed(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        """Clean embeddings (n, d) float32 and token counts for ``texts``."""
        raise NotImplementedError


class LocalBackend(Backend):
    """A sentence-transformers model in-process (L2-normalised float32 outputs)."""

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"privembed-embed-{config.name}")
        self._embedder: Any = None

    async def start(self) -> None:
        from ..embedders import Embedder

        loop = asyncio.get_running_loop()
        cfg = self.config
        if cfg.threads is not None:
            import torch

            # process-wide; on a shared or small machine one thread avoids OpenMP
            # oversubscription (measured 7x faster single-text latency on 2 loaded cores)
            torch.set_num_threads(cfg.threads)
        self._embedder = await loop.run_in_executor(
            self._executor,
            lambda: Embedder(cfg.model, batch_size=cfg.batch_size, device=cfg.device),
        )
        self.dim = int(self._embedder.dim)

    async def close(self) -> None:
        self._executor.shutdown(wait=True)

    def _embed_sync(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        X = np.asarray(self._embedder.encode(texts), dtype=np.float32)
        model = getattr(self._embedder, "_model", None)
        tok = getattr(model, "tokenizer", None)
        if tok is not None:
            limit = int(getattr(model, "max_seq_length", 512) or 512)
            ids = tok(texts, add_special_tokens=True, truncation=True, max_length=limit)
            counts = [len(x) for x in ids["input_ids"]]
        else:  # pragma: no cover - every sentence-transformers text model has a tokenizer
            counts = [max(1, len(t.split())) for t in texts]
        return X, counts

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


class UpstreamBackend(Backend):
    """An OpenAI-compatible embeddings endpoint (``POST {base_url}/embeddings``)."""

    def __init__(self, config: BackendConfig, *, transport: Any = None) -> None:
        super().__init__(config)
        self._transport = transport
        self._client: Any = None

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
        self._client = httpx.AsyncClient(
            base_url=base,
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_s),
            limits=httpx.Limits(max_connections=max(4, cfg.max_concurrency * 2)),
            transport=self._transport,
            trust_env=False,
            follow_redirects=False,
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def embed(self, texts: list[str]) -> tuple[NDArray[np.float32], list[int]]:
        import httpx

        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "input": texts,
            "encoding_format": cfg.encoding_format,
        }
        if cfg.dimensions is not None:
            body["dimensions"] = cfg.dimensions
        try:
            resp = await self._client.post("embeddings", json=body)
        except httpx.TimeoutException:
            raise BackendError("the upstream embedding service timed out", status=504) from None
        except httpx.HTTPError:
            raise BackendError("the upstream embedding service is unreachable") from None
        if resp.status_code == 429 or resp.status_code == 503:
            ra = resp.headers.get("retry-after")
            try:
                retry = float(ra) if ra is not None else 1.0
            except ValueError:
                retry = 1.0
            raise BackendError(
                f"the upstream embedding service is overloaded (HTTP {resp.status_code})",
                status=503,
                retry_after=retry,
            )
        if resp.status_code != 200:
            raise BackendError(f"the upstream embedding service returned HTTP {resp.status_code}")
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
