"""Private search latency: exact re-rank of k' candidates over a store of sealed payloads.

Run: python benchmarks/bench_rerank.py [--n 100000] [--dim 384] [--queries 50]
Prints per-query latency (median and p90, after the store is open) of plain protected search
(k = 10) and of search with exact re-rank at k' = 100 and 1,000 (fetch, open the payloads with
the key, exact cosine), per store, plus the storage overhead of the payloads.
"""

from __future__ import annotations

import argparse
import tempfile
import time
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--stores", default="faiss,chroma,qdrant")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    Q = X[: args.queries] + 0.05 * rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    key = bytes(range(32))
    mech = get_mechanism("laplace", epsilon=200.0)
    print(f"## exact re-rank latency, {args.n} x {args.dim}, {args.queries} queries\n")
    print(
        "| store | index s | payload bytes/record | plain k=10 ms (p50/p90) | rerank 100 ms | rerank 1000 ms |"
    )
    print("|---|---|---|---|---|---|")
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            with ProtectedCollection.open(
                store, Path(tmp), "bench", mechanism=mech, key=key, payloads=True
            ) as col:
                for s in range(0, args.n, 10_000):
                    col.add([f"r{i}" for i in range(s, s + 10_000)], X[s : s + 10_000])
                t_index = time.perf_counter() - t0
                size = len(col.store.search(X[:1], 1)[0][0].payload or b"")
                plain = _timed(lambda i: col.query(Q[i], k=10), args.queries)
                r100 = _timed(lambda i: col.query(Q[i], k=10, rerank=100), args.queries)
                r1000 = _timed(lambda i: col.query(Q[i], k=10, rerank=1000), args.queries)
        print(
            f"| {store} | {t_index:.0f} | {size} | {plain[0]:.1f} / {plain[1]:.1f} | "
            f"{r100[0]:.1f} / {r100[1]:.1f} | {r1000[0]:.1f} / {r1000[1]:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
