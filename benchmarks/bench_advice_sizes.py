"""advise's recommendation at a corpus size, and a real search that checks its promise (issue 37).

For an embeddings file (e.g. 120,000 dictionary sentences embedded with ``privembed embed``):
``advise_modes`` under the default budget (4 MB per query, 64 MB one-time sealed fetch) with the
modes given, then the recommended setting indexed for real -- sealed, or the noise setting in a
FAISS collection with sealed payloads and a fixed key -- and searched with advise's own
pseudo-queries (``advice_queries``) at the k' it chose. Prints one table row: n, the
recommendation, its cost per query, the recall advise promised (mean, 95% lower end) and the
recall the search reached, with timings.

Run (a corpus and, for the subspace mode, public embeddings of the same kind)::

    privembed embed corpus.txt -o corpus.npz
    privembed embed public.txt -o public.npz
    python benchmarks/bench_advice_sizes.py corpus.npz --public public.npz

Results: docs/benchmarks.md ("advise at corpus sizes").
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from privembed.data.io import read_embeddings
from privembed.evaluation.modes import advice_queries, advise_modes
from privembed.integrations.collection import ProtectedCollection
from privembed.mechanisms import build_mechanism
from privembed.mechanisms.subspace import SubspaceBasis


def _recall(hits, top) -> float:
    return float(
        np.mean(
            [
                len({str(j) for j in t} & {h.id for h in hs}) / len(t)
                for t, hs in zip(top, hits, strict=True)
            ]
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("embeddings")
    ap.add_argument("--public", help="public embeddings for the subspace basis (exact PCA)")
    ap.add_argument("--n", type=int, default=0, help="first n rows (0: all)")
    ap.add_argument("--modes", default="sealed,rerank,subspace+rerank")
    ap.add_argument("--mechanisms", default="laplace")
    ap.add_argument("--production-size", type=int, default=None)
    args = ap.parse_args()

    X = np.asarray(read_embeddings(args.embeddings).X, dtype=np.float32)
    if args.n:
        X = X[: args.n]
    n, _d = X.shape
    basis = None
    if args.public and "subspace+rerank" in args.modes:
        basis = SubspaceBasis.from_embeddings(np.asarray(read_embeddings(args.public).X))
    t0 = time.perf_counter()
    adv = advise_modes(
        X, modes=tuple(args.modes.split(",")), mechanisms=tuple(args.mechanisms.split(",")),
        basis=basis, seed=0, production_size=args.production_size,
        on_step=lambda m: print(f"  [{time.perf_counter() - t0:6.1f} s] {m}", flush=True),
    )  # fmt: skip
    t_adv = time.perf_counter() - t0
    for line in adv.lines():
        print(line)
    r = adv.recommended
    if r is None:
        print(f"| {n:,} | none meets the floor | | | | {t_adv:.0f} s |")
        return
    Q = advice_queries(X, seed=0)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    top = np.argsort(-(Q @ Xn.T), axis=1)[:, :10]
    ids = [str(i) for i in range(n)]
    key = bytes(range(32))
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if r.mode == "sealed":
            mech = "sealed"
            opts = {}
        else:
            if r.mode == "subspace+rerank":  # advise's own construction, with the basis
                mech = build_mechanism(
                    "subspace", basis=basis, epsilon=r.epsilon, noise=r.mechanism
                )
            else:
                mech = build_mechanism(**r.config)
            opts = {"payloads": True}
        with ProtectedCollection.open("faiss", os.path.join(tmp, "db"), "bench", mechanism=mech,
                                      key=key, **opts) as col:  # fmt: skip
            col.add(ids, X)
            t_index = time.perf_counter() - t1
            t2 = time.perf_counter()
            hits = col.query(Q, k=10) if r.mode == "sealed" else col.query(Q, k=10, rerank=r.depth)
            t_search = time.perf_counter() - t2
    got = _recall(hits, top)
    assert r.cost is not None
    eps = "-" if r.epsilon is None else f"{r.epsilon:.4g}"
    print(
        f"| {n:,} | {r.label} | {eps} | {r.depth:,} | {r.cost.text()} | {r.utility:.3f} "
        f"({r.utility_low:.3f}) | {got:.3f} | advise {t_adv:.0f} s, index {t_index:.0f} s, "
        f"{len(Q)} queries {1000 * t_search / len(Q):.1f} ms each |"
    )


if __name__ == "__main__":
    main()
