"""What one private search costs a client, in the user's units: bytes fetched, payloads opened
and milliseconds -- and the largest depth k' a budget of them pays for.

The sealed mode fetches every one of the ``n`` payloads (no vector, nothing about the query is
sent): once per client session when the client keeps the opened vectors (in memory, or
encrypted on disk) -- a one-time *sync* of ``n (16 + p)`` bytes checked against
``max_sync_bytes``, after which a query costs a local exact scan and no byte -- or on every
query when it does not (``client_cache=False``), checked against the per-query budget.

The cost model of a query that fetches ``k'`` candidates from a store of ``n`` records:

.. math::

    \\text{bytes} = k' \\cdot (4 d_s + 16 + p) + 4 d_s, \\qquad
    \\text{ms} = t_\\text{scan} \\cdot n d_s + t_\\text{open} \\cdot k'

where ``d_s`` is the dimension of what the store holds (``d``, or ``k`` in the subspace), 16
bytes name a record, ``p`` is a sealed payload's size (:func:`privembed.keys.payload.
payload_size`; 0 when nothing is opened) and the last ``4 d_s`` is the query sent. The two
rates are measured on this machine (:meth:`Rates.measure`: a flat inner-product scan and
AES-GCM opening plus the exact re-rank of a batch of payloads), so the milliseconds are an
estimate for a store on this machine, not for a remote one (add its round trip).

Examples
--------
>>> r = Rates(open_ms=0.002, scan_ms_per_mdim=0.5, source="given")
>>> c = query_cost("rerank", n=2000, d=384, store_dim=384, depth=100, rates=r)
>>> c.payloads, c.bytes
(100, 322836)
>>> Budget(max_bytes=4e6).depth_cap("rerank", n=100_000, d=384, store_dim=384, rates=r)
1244
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..core._validation import check_int, check_real
from ..search.sealed import ID_BYTES, sealed_fetch_bytes

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_SYNC_BYTES",
    "Budget",
    "QueryCost",
    "Rates",
    "query_cost",
    "sealed_cost",
]

#: the default budget of bytes fetched per query (4 MB)
DEFAULT_MAX_BYTES = 4_000_000
#: the default budget of a one-time fetch of every sealed payload by a client (64 MB: about
#: 38,000 records of d = 384)
DEFAULT_MAX_SYNC_BYTES = 64_000_000
#: modes whose candidates carry a sealed payload that the client opens
OPENS = ("rerank", "subspace+rerank")


@dataclass(frozen=True)
class Rates:
    """Per-unit times on this machine: opening one payload (and re-ranking its vector), and
    scanning a million stored dimensions in a flat search."""

    open_ms: float
    scan_ms_per_mdim: float
    source: str

    @classmethod
    def measure(cls, d: int = 384, *, n: int = 512, repeats: int = 3) -> Rates:
        """Measured here: the best of ``repeats`` timings of opening ``n`` sealed payloads of
        dimension ``d`` (:meth:`~privembed.keys.payload.PayloadCodec.open_batch`) with the dot
        products of their re-rank, and of a flat scan of 20,000 stored rows."""
        return _measure(check_int("d", d, ge=1), check_int("n", n, ge=1), repeats)


@lru_cache(maxsize=8)
def _measure(d: int, n: int, repeats: int) -> Rates:
    from ..keys.payload import PayloadCodec

    rng = np.random.default_rng(0)  # what is timed, not a release: any vectors do
    X = rng.standard_normal((n, d)).astype(np.float32)
    codec = PayloadCodec(bytes(32))
    ids = [f"r{i}" for i in range(n)]
    sealed = codec.seal_many(X, ids=ids, collection="cost")
    q = rng.standard_normal(d)
    rows = 20_000
    S = rng.standard_normal((rows, d)).astype(np.float32)
    best_open = best_scan = math.inf
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        V = codec.vectors(sealed, ids=ids, collection="cost")
        np.argsort(-(V @ q))
        best_open = min(best_open, time.perf_counter() - t)
        t = time.perf_counter()
        np.argpartition(-(S @ q.astype(np.float32)), 100)
        best_scan = min(best_scan, time.perf_counter() - t)
    return Rates(
        open_ms=1e3 * best_open / n,
        scan_ms_per_mdim=1e3 * best_scan / (rows * d / 1e6),
        source=f"measured on this machine ({n} payloads of d = {d}; a scan of {rows:,} rows)",
    )


@dataclass(frozen=True)
class QueryCost:
    """The cost of one query: bytes fetched, payloads opened, estimated milliseconds."""

    bytes: int
    payloads: int
    ms: float
    sync_bytes: int = 0  # fetched once per client session (the sealed mode with a cache)

    def text(self) -> str:
        """E.g. ``"0.32 MB, 100 payloads opened, ~2 ms"``."""
        opened = f"{self.payloads:,} payloads opened" if self.payloads else "no payload opened"
        out = f"{self.bytes / 1e6:.2f} MB, {opened}, ~{self.ms:.0f} ms"
        if self.sync_bytes:
            out += f" (after a one-time fetch of {self.sync_bytes / 1e6:.2f} MB per session)"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "payloads": self.payloads,
            "ms": round(self.ms, 3),
            "sync_bytes": self.sync_bytes,
        }


def _per_candidate(mode: str, d: int, store_dim: int) -> int:
    from ..keys.payload import payload_size

    return 4 * store_dim + ID_BYTES + (payload_size(d) if mode in OPENS else 0)


def sealed_cost(*, n: int, d: int, rates: Rates, client_cache: bool = True) -> QueryCost:
    """The cost of a query in the sealed mode: with ``client_cache`` a one-time fetch of every
    payload (``sync_bytes``) and then a local scan per query; without it, every payload fetched
    and opened on every query."""
    n = check_int("n", n, ge=1)
    fetch = sealed_fetch_bytes(n, d)  # no vector in the store, nothing about the query sent
    scan = rates.scan_ms_per_mdim * n * d / 1e6
    if client_cache:
        return QueryCost(0, 0, float(scan), sync_bytes=int(fetch))
    return QueryCost(int(fetch), n, float(scan + rates.open_ms * n))


def query_cost(mode: str, *, n: int, d: int, store_dim: int, depth: int, rates: Rates) -> QueryCost:
    """The cost of one query fetching ``depth`` candidates (see the module docstring)."""
    n = check_int("n", n, ge=1)
    depth = check_int("depth", depth, ge=1)
    b = depth * _per_candidate(mode, d, store_dim) + 4 * store_dim
    payloads = depth if mode in OPENS else 0
    ms = rates.scan_ms_per_mdim * n * store_dim / 1e6 + rates.open_ms * payloads
    return QueryCost(int(b), payloads, float(ms))


@dataclass(frozen=True)
class Budget:
    """What a user will pay per query: bytes (default 4 MB), milliseconds, and optionally a
    depth k' outright. None: no limit of that kind."""

    max_bytes: float | None = DEFAULT_MAX_BYTES
    max_latency_ms: float | None = None
    max_depth: int | None = None
    max_sync_bytes: float | None = DEFAULT_MAX_SYNC_BYTES
    client_cache: bool = True

    def __post_init__(self) -> None:
        if self.max_bytes is not None:
            check_real("max_bytes_per_query", self.max_bytes, gt=0)
        if self.max_latency_ms is not None:
            check_real("max_latency_ms", self.max_latency_ms, gt=0)
        if self.max_depth is not None:
            check_int("max_depth", self.max_depth, ge=1)
        if self.max_sync_bytes is not None:
            check_real("max_sync_bytes", self.max_sync_bytes, gt=0)

    def sealed_fits(self, cost: QueryCost) -> bool:
        """Whether the sealed mode's cost (:func:`sealed_cost`) fits: its one-time fetch within
        ``max_sync_bytes``, its per-query bytes, payloads and milliseconds within the rest."""
        if self.max_sync_bytes is not None and cost.sync_bytes > self.max_sync_bytes:
            return False
        if self.max_bytes is not None and cost.bytes > self.max_bytes:
            return False
        if self.max_depth is not None and cost.payloads > self.max_depth:
            return False
        return self.max_latency_ms is None or cost.ms <= self.max_latency_ms

    def depth_cap(self, mode: str, *, n: int, d: int, store_dim: int, rates: Rates) -> int:
        """The largest k' whose cost fits the budget (0 when even one candidate does not)."""
        cap = n
        if self.max_depth is not None:
            cap = min(cap, self.max_depth)
        if self.max_bytes is not None:
            cap = min(
                cap, int((self.max_bytes - 4 * store_dim) // _per_candidate(mode, d, store_dim))
            )
        if self.max_latency_ms is not None:
            scan = rates.scan_ms_per_mdim * n * store_dim / 1e6
            left = self.max_latency_ms - scan
            if left < 0:
                return 0
            if mode in OPENS and rates.open_ms > 0:
                cap = min(cap, int(left // rates.open_ms))
        return max(0, cap)

    def text(self) -> str:
        parts = []
        if self.max_bytes is not None:
            parts.append(f"<= {self.max_bytes / 1e6:g} MB per query")
        if self.max_latency_ms is not None:
            parts.append(f"<= {self.max_latency_ms:g} ms per query")
        if self.max_depth is not None:
            parts.append(f"k' <= {self.max_depth}")
        if self.max_sync_bytes is not None and self.client_cache:
            parts.append(f"one-time fetch <= {self.max_sync_bytes / 1e6:g} MB")
        return ", ".join(parts) or "no limit"

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_bytes_per_query": self.max_bytes,
            "max_latency_ms": self.max_latency_ms,
            "max_depth": self.max_depth,
            "max_sync_bytes": self.max_sync_bytes,
            "client_cache": self.client_cache,
        }
