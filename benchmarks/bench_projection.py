"""Throughput of the three public JL projections at d = 768 -> k = 128 on 100,000 vectors.

One run, one process, the same float32 input for every kind; each kind is timed ``--repeat``
times after a warm-up; best and median wall times and the least CPU time (all threads) are
reported, plus the dense product with BLAS limited to one thread (``threadpoolctl``), since
the SRHT and sparse paths are single-threaded. Also checks that every kind's fast path equals ``X @ P.T`` on a slice.

    python benchmarks/bench_projection.py            # ~1 minute on 2 cores
    python benchmarks/bench_projection.py --n 20000  # quicker

Asymptotics: dense is O(n k d) = 9.8e9 multiply-adds here, sparse (density 1/3) O(n k d / 3),
SRHT O(n m log2 m) with m = 1024 (d padded to a power of two) = 1.0e9 butterfly operations.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import scipy

from privembed.core.rng import as_generator
from privembed.mechanisms import JLProjection


def _time(fn, repeat: int) -> tuple[list[float], float]:
    """Wall times of ``repeat`` calls after a warm-up, and the least CPU time of one call
    (all threads; less sensitive than wall time to other processes on a shared machine)."""
    fn()  # warm-up (builds P, caches the float32 copy)
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, min(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--k", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n, d, k = args.n, args.d, args.k
    X = as_generator(0).standard_normal((n, d), dtype=np.float32)
    rows = []
    for kind in ("gaussian", "sparse", "srht"):
        P = JLProjection(k=k, kind=kind, seed=0)
        ref = X[:256].astype(np.float64) @ P.matrix(d).T
        got = P.apply(X[:256])
        assert np.allclose(got, ref, rtol=1e-4, atol=1e-4), kind
        times, cpu = _time(lambda P=P: P.apply(X), args.repeat)
        rows.append((kind, min(times), statistics.median(times), cpu))
    one_thread = None
    try:
        from threadpoolctl import threadpool_limits

        G = JLProjection(k=k, kind="gaussian", seed=0)
        with threadpool_limits(limits=1, user_api="blas"):
            w1, c1 = _time(lambda: G.apply(X), args.repeat)
            one_thread = (min(w1), statistics.median(w1), c1)
    except ImportError:  # pragma: no cover - optional
        pass
    dense_best = rows[0][1]
    print(
        f"n={n:,} float32 vectors, d={d} -> k={k}; cores={os.cpu_count()}, "
        f"load avg {os.getloadavg()[0]:.1f}; numpy {np.__version__}, scipy {scipy.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}"
    )
    print()
    if one_thread is not None:
        rows.append(("gaussian, BLAS 1 thread", *one_thread))
    print("| kind | wall best (s) | wall median (s) | CPU (s) | vectors/s (best wall) | vs dense |")
    print("|---|---|---|---|---|---|")
    for kind, best, med, cpu in rows:
        print(
            f"| {kind} | {best:.3f} | {med:.3f} | {cpu:.3f} | {n / best:,.0f} | "
            f"{dense_best / best:.2f}x |"
        )


if __name__ == "__main__":
    main()
