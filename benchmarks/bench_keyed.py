"""Cost of keyed (repeat-safe) noise relative to unkeyed noise, measured in one run.

Run: python benchmarks/bench_keyed.py [--rows 100000] [--dim 384]
Prints two markdown tables: in-memory ``privatize`` and end-to-end ``privembed protect`` on a
Parquet file (read, protect, write), keyed vs unkeyed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from privembed import GaussianMechanism, LaplaceMechanism, PurkayasthaMechanism
from privembed.io import write_embeddings
from privembed.keyed import keygen, load_key


def best_of(fn, repeat: int = 2) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    X = np.random.default_rng(0).standard_normal((args.rows, args.dim)).astype(np.float32)
    ids = [f"doc-{i}" for i in range(args.rows)]
    with tempfile.TemporaryDirectory() as tmp:
        keyfile = Path(tmp) / "k.key"
        keygen(keyfile)
        key = load_key(keyfile)
        print(f"## in-memory privatize, {args.rows} x {args.dim} float32\n")
        print("| mechanism | unkeyed s | keyed (philox) s | ratio | keyed (aes) s | ratio |")
        print("|---|---|---|---|---|---|")
        for m in (
            GaussianMechanism(epsilon=5, delta=1e-5),
            LaplaceMechanism(epsilon=50),
            PurkayasthaMechanism(epsilon=50),
        ):
            t0 = best_of(lambda m=m: m.privatize(X, rng=0))
            t1 = best_of(lambda m=m: m.privatize(X, ids=ids, key=key))
            t2 = best_of(lambda m=m: m.privatize(X, ids=ids, key=key, generator="aes"), 1)
            print(f"| {m.name} | {t0:.2f} | {t1:.2f} | {t1 / t0:.2f} | {t2:.2f} | {t2 / t0:.2f} |")
        src = Path(tmp) / "e.parquet"
        write_embeddings(src, X, ids=ids)
        print(f"\n## end to end: privembed protect on Parquet, {args.rows} x {args.dim}\n")
        print("| mechanism | unkeyed s | keyed s | ratio |")
        print("|---|---|---|---|")
        for mech in (
            ["gaussian", "--epsilon", "5", "--delta", "1e-5"],
            ["laplace", "--epsilon", "50"],
        ):
            base = [
                sys.executable,
                "-m",
                "privembed.cli",
                "protect",
                str(src),
                "-o",
                str(Path(tmp) / "o.parquet"),
                "-m",
                *mech,
            ]

            def run(extra: list[str], base: list[str] = base) -> None:
                subprocess.run(base + extra, check=True, capture_output=True)

            t0 = best_of(lambda: run([]))
            t1 = best_of(lambda: run(["--key-file", str(keyfile)]))
            print(f"| {mech[0]} | {t0:.2f} | {t1:.2f} | {t1 / t0:.2f} |")


if __name__ == "__main__":
    main()
