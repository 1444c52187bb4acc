"""pgvector beside FAISS: index and exact re-rank latency of a protected collection.

Run: python benchmarks/bench_pgvector.py            (10,000 records: a quick look)
     python benchmarks/bench_pgvector.py --full     (100,000 records, as docs/benchmarks.md)
Options: --n N, --dim 384, --queries 30, --stores faiss,pgvector,pgvector-hnsw

The database is ``PRIVEMBED_PG_DSN`` if set, else a temporary local PostgreSQL with pgvector
started for the run (pgserver, the dev extra) and removed after it. Each store indexes the same
Laplace-protected vectors with sealed payloads (``ProtectedCollection.add`` in batches of
10,000: protect, seal, upsert; ``pgvector-hnsw`` then builds its HNSW index on the loaded data,
included in its index time), then answers the same queries: plain protected search (k = 10)
and exact re-rank of k' = 100 and 1,000 candidates (fetch, open the payloads with the key,
exact cosine). It prints a table (index seconds and records/s; per-query latency median / p90
after the store is open) and how many queries' re-ranked top 10 equal FAISS's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from privembed import get_mechanism
from privembed.integrations.collection import ProtectedCollection


def _timed(fn, n: int) -> tuple[float, float]:
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3, float(np.percentile(times, 90)) * 1e3


@contextlib.contextmanager
def _database() -> Iterator[str]:
    """``PRIVEMBED_PG_DSN``, or a temporary local server's database."""
    if os.environ.get("PRIVEMBED_PG_DSN"):
        yield os.environ["PRIVEMBED_PG_DSN"]
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    root = Path(tempfile.mkdtemp(prefix="privembed-bench-pg-"))
    server = pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="records (default 10,000)")
    ap.add_argument("--full", action="store_true", help="100,000 records")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--stores", default="faiss,pgvector,pgvector-hnsw")
    args = ap.parse_args()
    n = args.n or (100_000 if args.full else 10_000)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, args.dim)).astype(np.float32)
    Q = X[: args.queries] + 0.05 * rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    key = bytes(range(32))
    mech = get_mechanism("laplace", epsilon=200.0)
    try:
        import psycopg

        pg = psycopg.__version__
    except ImportError:
        pg = "-"
    print(
        f"## pgvector beside FAISS: {n} x {args.dim}, {args.queries} queries "
        f"(Python {platform.python_version()}, psycopg {pg}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f})\n"
    )
    print(
        "| store | index s | records/s | plain k=10 ms (p50/p90) | rerank 100 ms | "
        "rerank 1000 ms | top-10 = FAISS |"
    )
    print("|---|---|---|---|---|---|---|")
    reference: list[list[str]] | None = None
    with _database() as dsn, tempfile.TemporaryDirectory() as tmp:
        for store in args.stores.split(","):
            kind, _, index = store.partition("-")
            options = {"dsn": dsn} if kind == "pgvector" else {}
            t0 = time.perf_counter()
            with ProtectedCollection.open(
                kind, Path(tmp) / store, f"bench-{store}", mechanism=mech, key=key,
                payloads=True, store_options=options,
            ) as col:  # fmt: skip
                for s in range(0, n, 10_000):
                    e = min(n, s + 10_000)
                    col.add([f"r{i}" for i in range(s, e)], X[s:e])
                if index:  # built on the loaded data (the bulk-load path)
                    col.store.build_index(index)
                t_index = time.perf_counter() - t0
                plain = _timed(lambda i: col.query(Q[i], k=10), args.queries)
                r100 = _timed(lambda i: col.query(Q[i], k=10, rerank=100), args.queries)
                r1000 = _timed(lambda i: col.query(Q[i], k=10, rerank=1000), args.queries)
                tops = [[h.id for h in hs] for hs in col.query(Q, k=10, rerank=1000)]
            if reference is None:
                reference = tops
            same = sum(a == b for a, b in zip(tops, reference, strict=True))
            print(
                f"| {store} | {t_index:.1f} | {n / t_index:,.0f} | {plain[0]:.1f} / "
                f"{plain[1]:.1f} | {r100[0]:.1f} / {r100[1]:.1f} | {r1000[0]:.1f} / "
                f"{r1000[1]:.1f} | {same}/{len(tops)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
