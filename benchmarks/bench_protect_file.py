"""Peak memory and wall time of `privembed protect` on a 100,000 x 384 float32 Parquet file.

Run: python benchmarks/bench_protect_file.py [--rows N] [--dim D]
Prints a markdown table: file size, peak RSS of the protect process, ratio to the file size.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from privembed.io import write_embeddings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "emb.parquet"
        X = np.random.default_rng(0).standard_normal((args.rows, args.dim)).astype(np.float32)
        write_embeddings(src, X, ids=np.arange(args.rows))
        del X
        size_mb = src.stat().st_size / 2**20
        print("| mechanism | rows x dim | file MB | peak RSS MB | RSS / file | wall s |")
        print("|---|---|---|---|---|---|")
        for mech in (
            ["gaussian", "--epsilon", "5", "--delta", "1e-5"],
            ["laplace", "--epsilon", "50"],
            ["purkayastha", "--epsilon", "50"],
        ):
            out = Path(tmp) / "out.parquet"
            cmd = [
                sys.executable,
                "-m",
                "privembed.cli",
                "protect",
                str(src),
                "-o",
                str(out),
                "-m",
                *mech,
            ]
            t0 = time.perf_counter()
            # each protect runs in its own child; ru_maxrss of children is the max over them,
            # so run each in a fresh wrapper process and read the peak it reports
            wrapper = (
                "import resource,subprocess,sys;subprocess.run(sys.argv[1:],check=True);"
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
            )
            res = subprocess.run(
                [sys.executable, "-c", wrapper, *cmd], check=True, capture_output=True, text=True
            )
            wall = time.perf_counter() - t0
            peak_mb = int(res.stdout.strip().splitlines()[-1]) / 1024
            print(
                f"| {mech[0]} | {args.rows} x {args.dim} | {size_mb:.0f} | {peak_mb:.0f} | "
                f"{peak_mb / size_mb:.2f} | {wall:.1f} |"
            )
            out.unlink()


if __name__ == "__main__":
    main()
