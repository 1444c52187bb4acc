"""How much of GloVe 6B 50d can an exact search skip for Laplace-noised queries?

    python docs/experiments/text_exact_search_bounds.py     # about a minute on one core

Partitions the 400,000 vectors into 1,024 k-means cells and, for noisy queries w + Z of random
words, counts the vectors in cells that the standard exact-search bounds cannot rule out given
the true nearest-neighbour distance: the ball bound ``|q - c| - radius`` and the bisector bound
``(|q - c_j|^2 - |q - c_i|^2) / (2 |c_i - c_j|)`` (``c_i`` the cell nearest to ``q``). Those
vectors must be scanned by any exact method built on this partition. Writes
docs/experiments/text_exact_search_bounds.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--cells", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

    import faiss
    import numpy as np

    from privembed.core.rng import as_generator
    from privembed.text import NearestNeighbourIndex, Vocabulary, WordSanitizer

    faiss.omp_set_num_threads(args.threads)
    gen = as_generator(args.seed)
    voc = Vocabulary.glove()
    X = np.ascontiguousarray(voc.vectors)
    train = X[gen.choice(len(X), 100_000, replace=False)]
    km = faiss.Kmeans(voc.dim, args.cells, niter=15, seed=args.seed, max_points_per_centroid=100)
    km.train(train)
    C = km.centroids.astype(np.float64)
    _, cell = km.index.search(X, 1)
    cell = cell[:, 0]
    sizes = np.bincount(cell, minlength=args.cells)
    radius = np.zeros(args.cells)
    np.maximum.at(radius, cell, np.linalg.norm(X - C[cell], axis=1))
    idx = NearestNeighbourIndex(X)
    words = gen.choice(len(X), args.queries, replace=False)
    lines = [
        "# Exact-search bounds on GloVe 6B 50d (generated)",
        "",
        f"`python docs/experiments/text_exact_search_bounds.py --queries {args.queries} "
        f"--cells {args.cells} --seed {args.seed}`",
        "",
        "| epsilon | vectors left to scan (ball + bisector bounds) | ball bound only |",
        "|---:|---:|---:|",
    ]
    cc = np.linalg.norm(C[:, None, :] - C[None, :, :], axis=-1)
    for eps in (1, 5, 10, 20, 40):
        q = WordSanitizer(vocabulary=voc, epsilon=eps, index=idx).noisy_vectors(words, rng=gen)
        best = np.sqrt(np.maximum(idx.search(q, 1)[0][:, 0].astype(np.float64), 0))
        dq = np.sqrt(((q[:, None, :] - C[None, :, :]) ** 2).sum(-1))
        near = dq.argmin(axis=1)
        ball = dq - radius[None, :]
        den = 2 * cc[near]
        den[den == 0] = np.inf
        bisector = (dq**2 - dq[np.arange(len(q)), near][:, None] ** 2) / den
        scan = np.maximum(ball, bisector) < best[:, None]
        left = (scan * sizes).sum(axis=1).mean() / len(X)
        left_ball = ((ball < best[:, None]) * sizes).sum(axis=1).mean() / len(X)
        lines.append(f"| {eps} | {left:.2%} | {left_ball:.2%} |")
    (HERE / "text_exact_search_bounds.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
