"""Sampling on 1 and 2 threads, and keyed vs fresh noise, in one run.

Run: python benchmarks/bench_threads.py [--rows 100000] [--dim 384] [--repeat 5]

For each mechanism, interleaved and best of ``--repeat``: fresh noise (``release.protect``) with
1 and 2 sampling threads, keyed noise (Philox) with 1 and 2, and a bare bulk normal draw of the
same size (numpy's default generator, one thread) as the floor. Also checks that seeded output
is identical for 1 and 2 threads. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from privembed import GaussianMechanism, LaplaceMechanism, PurkayasthaMechanism
from privembed.mechanisms.base import get_num_threads, set_num_threads
from privembed.release import protect


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n, d = args.rows, args.dim
    X = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    ids = [f"doc-{i}" for i in range(n)]
    key = bytes(range(32))
    before = get_num_threads()
    out = np.empty((n, d))
    g = np.random.default_rng(1)
    print(f"## sampling threads and keyed noise, {n} x {d} float32, best of {args.repeat}\n")
    print("| mechanism | bare draw s | fresh 1 thr s | fresh 2 thr s | speed-up | keyed 1 thr s "
          "| keyed 2 thr s | keyed / fresh (2 thr) | seeded 1 thr == 2 thr |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for m in (
            GaussianMechanism(epsilon=5, delta=1e-5),
            LaplaceMechanism(epsilon=50),
            PurkayasthaMechanism(epsilon=50),
        ):
            t: dict[str, list[float]] = {}

            def clock(label: str, fn, t=t) -> None:
                s = time.perf_counter()
                fn()
                t.setdefault(label, []).append(time.perf_counter() - s)

            for _ in range(args.repeat):
                clock("bare", lambda: g.standard_normal(out=out))
                for th in (1, 2):
                    set_num_threads(th)
                    clock(f"fresh{th}", lambda m=m: protect(X, m))
                    clock(f"keyed{th}", lambda m=m: protect(X, m, ids=ids, key=key))
            b = {k: min(v) for k, v in t.items()}
            set_num_threads(1)
            s1 = protect(X[:5000], m, rng=7)
            set_num_threads(2)
            s2 = protect(X[:5000], m, rng=7)
            print(
                f"| {m.name} | {b['bare']:.3f} | {b['fresh1']:.3f} | {b['fresh2']:.3f} | "
                f"{b['fresh1'] / b['fresh2']:.2f} | {b['keyed1']:.3f} | {b['keyed2']:.3f} | "
                f"{b['keyed2'] / b['fresh2']:.2f} | {np.array_equal(s1, s2)} |",
                flush=True,
            )
    finally:
        set_num_threads(before)


if __name__ == "__main__":
    main()
