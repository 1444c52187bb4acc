"""Time of learning a concept mask from precomputed embeddings ([T26] App. G: 25 min on a GPU).

The default schedule of :class:`privembed.concepts.MaskLearner` ([T26] App. H.2: 100 epochs,
batch 64, MLP 256-128, Adam 1e-4, plus the 20-epoch unmasked reference probe) on 10,000 D+/D-
pairs of 384-d unit vectors (synthetic: the concept moves 16 dimensions). Embeddings are
precomputed, as in ``privembed concept learn`` (which caches them).

Run: python benchmarks/bench_concepts.py [--pairs 10000] [--epochs 100] [--threads 1,2]
Prints a markdown table: threads, wall and CPU seconds, ms per step, the machine's load average,
and the machine / torch version. ``--epochs`` below 100 extrapolates linearly to 100 epochs.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmasked probe")
    args = ap.parse_args()

    import torch

    from privembed.concepts import MaskLearner

    rng = np.random.default_rng(0)
    neg = rng.standard_normal((args.pairs, args.dim))
    neg /= np.linalg.norm(neg, axis=1, keepdims=True)
    pos = neg.copy()
    pos[:, :16] += 0.1 * rng.standard_normal((args.pairs, 16)) + 0.05
    pos /= np.linalg.norm(pos, axis=1, keepdims=True)
    pos, neg = pos.astype(np.float32), neg.astype(np.float32)

    n_train = 2 * (args.pairs - round(0.1 * args.pairs))
    steps = args.epochs * -(-n_train // 64)
    print(
        f"machine: {_cpu_model()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}; "
        f"{args.pairs} pairs x {args.dim}-d, {args.epochs} epochs ({steps} steps)"
    )
    print()
    print(
        "| threads | wall s | CPU s | ms/step (wall) | 100 epochs, wall s | load avg before/after | sparsity | val acc (mask / none) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for threads in (int(t) for t in args.threads.split(",")):
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        res = MaskLearner(
            epochs=args.epochs,
            num_threads=threads,
            baseline_epochs=0 if args.no_baseline else 20,
        ).fit(pos, neg, rng=0)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        load1 = os.getloadavg()[0]
        acc_none = res.val_accuracy_unmasked
        print(
            f"| {threads} | {wall:.1f} | {cpu:.1f} | {1e3 * wall / steps:.2f} | "
            f"{wall * 100 / args.epochs:.0f} | {load0:.1f} / {load1:.1f} | {res.sparsity:.3f} | "
            f"{res.val_accuracy_masked:.3f} / {'-' if acc_none is None else f'{acc_none:.3f}'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
