"""Wall time of a full utility sweep: 10,000 x 384 embeddings x 4 mechanisms x 5 epsilon x 5 runs.

Run: python benchmarks/bench_sweep.py [--rows 10000] [--dim 384] [--runs 5] [--n-queries 2000]
     [--mask-delta 0.01]

The embeddings are synthetic but shaped like sentence embeddings (unit vectors around 500
topic directions, so neighbours and ranks are not trivial). Every cell protects all rows and
computes every utility metric of :class:`privembed.evaluation.UtilityEvaluator` (mean cosine
over all rows; top-1 / recall@10 both ways and the 10-NN overlap for a fixed sample of
``--n-queries`` queries, each ranked against all rows), appending each finished cell to a
resumable results file (fsync per cell) as ``privembed evaluate`` does. The Mahalanobis
mechanism gets a synthetic concept mask (a random 25% of the dimensions at 1, the rest at 0) and
an explicit ``mask_delta`` (default 1e-2), so it runs the anisotropic sampler rather than
Sigma = I. Prints a Markdown table with the mean wall time per cell and per release for each
mechanism, the total wall and process CPU time, the BLAS/OpenMP thread settings and the load
average (the machine may be shared: compare CPU time when the load is high).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from privembed.evaluation import UtilityEvaluator, grid, run_sweep

MECHANISMS = ("gaussian", "laplace", "mahalanobis", "purkayastha")
EPSILONS = (1.0, 5.0, 10.0, 20.0, 50.0)
LIMIT_S = 300.0
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def synthetic_embeddings(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((500, d))
    X = centres[rng.integers(0, 500, n)] + 0.6 * rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n-queries", type=int, default=2000)
    ap.add_argument("--mask-delta", type=float, default=1e-2)
    args = ap.parse_args()
    X = synthetic_embeddings(args.rows, args.dim)
    mask = np.zeros(args.dim)
    mask[np.random.default_rng(1).permutation(args.dim)[: max(1, args.dim // 4)]] = 1.0
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "mask.npy", mask)
        maha = {"profile": str(Path(tmp) / "mask.npy"), "mask_delta": [args.mask_delta]}
        configs = grid(list(MECHANISMS), epsilon=EPSILONS, params={"mahalanobis": maha})
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        ev = UtilityEvaluator(X, n_queries=args.n_queries)
        res = run_sweep(
            X, configs, runs=args.runs, seed=0, utility=ev, results=Path(tmp) / "runs.jsonl"
        )
    wall = time.perf_counter() - t_wall
    cpu = time.process_time() - t_cpu
    load1 = os.getloadavg()
    cells = len(configs) * args.runs
    print(
        f"## sweep: {args.rows} x {args.dim} float32, {len(MECHANISMS)} mechanisms x "
        f"{len(EPSILONS)} epsilon x {args.runs} runs = {cells} cells, "
        f"{ev.query_index.size} queries\n"
    )
    threads = ", ".join(f"{v}={os.environ.get(v, 'unset')}" for v in THREAD_VARS)
    print(f"mahalanobis: 25% mask, mask_delta={args.mask_delta:g}; {threads}\n")
    print("| mechanism | cells | wall s per cell (mean) | release s per cell (mean) |")
    print("|---|---|---|---|")
    for mech in MECHANISMS:
        recs = [r for r in res.records if r["config"]["mechanism"] == mech]
        sec = np.mean([r["seconds"] for r in recs])
        rel = np.mean([r["release_seconds"] for r in recs])
        print(f"| {mech} | {len(recs)} | {sec:.2f} | {rel:.2f} |")
    full = args.rows >= 10_000 and args.dim >= 384 and args.runs >= 5
    verdict = ("PASS" if wall <= LIMIT_S else "OVER") if full else "not the full size"
    print(
        f"\ntotal wall {wall:.1f} s (limit {LIMIT_S:.0f} s for 10,000 x 384 x 5 runs: "
        f"{verdict}), process CPU {cpu:.1f} s ({os.cpu_count()} CPUs visible), "
        f"load average {load0[0]:.1f} -> {load1[0]:.1f}"
    )
    top1 = {
        c.mechanism: res.stats(c, "top1_originals")[0]
        for c in res.configs
        if c.params.get("epsilon") == 50.0
    }
    print("top-1 (originals) at epsilon = 50:", {k: round(v, 3) for k, v in top1.items()})


if __name__ == "__main__":
    main()
