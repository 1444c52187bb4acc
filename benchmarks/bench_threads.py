"""Sampling on 1 and 2 threads, and keyed vs fresh noise for each kind of record id, in one run.

Run: python benchmarks/bench_threads.py [--rows 100000] [--dim 384] [--repeat 7]
     [--id-types str,int,numpy] [--mechanisms gaussian,laplace,purkayastha]

For each mechanism, interleaved (every repeat runs every variant once, in turn): a bare bulk
normal draw of the same size (numpy's default generator, one thread: the floor of any Gaussian
mechanism on one core), fresh noise (``release.protect``) on 1 and 2 sampling threads, and keyed
noise (Philox, content-bound tags) on 2 threads with the record ids given as Python strings
(``"doc-17"``), Python ints and a numpy int64 array. A warm-up first loads the compiled kernels
(numba, extra ``fast``; they load once a process has drawn 200,000 keyed rows) so every timed
call is in the steady state. Prints the best and the median of ``--repeat`` for each variant and
the keyed / fresh ratio on two threads per id type (median over repeats of the ratio within a
repeat, so both sides of a ratio see the same load), and checks that seeded output is identical
for 1 and 2 threads. Compare ratios, not seconds: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from importlib.metadata import version

import numpy as np

from privembed import GaussianMechanism, LaplaceMechanism, PurkayasthaMechanism
from privembed.mechanisms.base import get_num_threads, set_num_threads
from privembed.release import protect

MECHANISMS = {
    "gaussian": lambda: GaussianMechanism(epsilon=5, delta=1e-5),
    "laplace": lambda: LaplaceMechanism(epsilon=50),
    "purkayastha": lambda: PurkayasthaMechanism(epsilon=50),
}


def id_sets(n: int, kinds: list[str]) -> dict[str, object]:
    make = {
        "str": lambda: [f"doc-{i}" for i in range(n)],
        "int": lambda: list(range(n)),
        "numpy": lambda: np.arange(n, dtype=np.int64),
    }
    return {k: make[k]() for k in kinds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--id-types", default="str,int,numpy")
    ap.add_argument("--mechanisms", default="gaussian,laplace,purkayastha")
    args = ap.parse_args()
    n, d = args.rows, args.dim
    kinds = args.id_types.split(",")
    X = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    ids = id_sets(n, kinds)
    key = bytes(range(32))
    before = get_num_threads()
    out = np.empty((n, d))
    g = np.random.default_rng(1)
    print(
        f"## sampling threads and keyed noise, {n:,} x {d} float32, {args.repeat} repeats\n\n"
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the start; Python {platform.python_version()}, numpy "
        f"{np.__version__}, numba {_version('numba')}\n"
    )
    cols = [f"keyed 2 thr ({k}) s" for k in kinds] + [f"keyed / fresh 2 thr ({k})" for k in kinds]
    print("| mechanism | bare draw s | fresh 1 thr s | fresh 2 thr s | speed-up | "
          + " | ".join(cols) + " | seeded 1 thr == 2 thr |")  # fmt: skip
    print("|---" * (6 + len(cols)) + "|")
    try:
        set_num_threads(2)
        for _ in range(3):  # warm-up: loads the compiled kernels (after 200,000 keyed rows)
            protect(X, GaussianMechanism(epsilon=5, delta=1e-5), ids=ids[kinds[0]], key=key)
        for name in args.mechanisms.split(","):
            m = MECHANISMS[name]()
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
                for k in kinds:  # set_num_threads(2) still holds
                    clock(k, lambda m=m, k=k: protect(X, m, ids=ids[k], key=key))
            set_num_threads(1)
            s1 = protect(X[:5000], m, rng=7)
            set_num_threads(2)
            s2 = protect(X[:5000], m, rng=7)
            cells = [_cell(t["bare"]), _cell(t["fresh1"]), _cell(t["fresh2"])]
            cells.append(f"{np.median(np.divide(t['fresh1'], t['fresh2'])):.2f}")
            cells += [_cell(t[k]) for k in kinds]
            cells += [f"{np.median(np.divide(t[k], t['fresh2'])):.2f}" for k in kinds]
            print(f"| {name} | " + " | ".join(cells) + f" | {np.array_equal(s1, s2)} |", flush=True)
    finally:
        set_num_threads(before)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end; cells: best / median seconds")


def _cell(times: list[float]) -> str:
    return f"{min(times):.3f} / {float(np.median(times)):.3f}"


def _version(pkg: str) -> str:
    try:
        return version(pkg)
    except Exception:
        return "not installed"


if __name__ == "__main__":
    main()
