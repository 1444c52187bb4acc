"""Peak memory and throughput of `privembed protect` on a large float32 Parquet file.

Run: python benchmarks/bench_protect_file.py [--rows N] [--dim D] [--mechanisms gaussian,laplace]
        [--keyed] [--workdir DIR]

The input is written in 100,000-row row groups without ever holding the whole matrix (so 10M x
384, a 15 GB file, can be generated on a 24 GB machine). Each `privembed protect` runs in its
own child process; the table gives the file size, the child's peak RSS, rows/s and wall time,
for fresh noise and (with --keyed) keyed noise with a ledger.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHUNK = 100_000


def write_input(path: Path, rows: int, dim: int) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from privembed.data.io import META_KEY, _numpy_to_list

    rng = np.random.default_rng(0)
    writer = None
    try:
        for s in range(0, rows, CHUNK):
            m = min(CHUNK, rows - s)
            X = rng.standard_normal((m, dim), dtype=np.float32)
            t = pa.table(
                {
                    "id": pa.array(np.arange(s, s + m, dtype=np.int64)),
                    "embedding": _numpy_to_list(X),
                }
            )
            if writer is None:
                meta = {META_KEY: json.dumps({"dim": dim}).encode()}
                writer = pq.ParquetWriter(path, t.schema.with_metadata(meta))
            writer.write_table(t.replace_schema_metadata(writer.schema.metadata))
    finally:
        if writer is not None:
            writer.close()


def run_protect(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one protect child."""
    wrapper = (
        "import resource,subprocess,sys;subprocess.run(sys.argv[1:],check=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], check=True, capture_output=True, text=True
    )
    return time.perf_counter() - t0, int(res.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--mechanisms", default="gaussian,laplace,purkayastha")
    ap.add_argument("--keyed", action="store_true", help="also keyed noise with a ledger")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temp folder)")
    args = ap.parse_args()
    params = {
        "gaussian": ["--epsilon", "5", "--delta", "1e-5"],
        "laplace": ["--epsilon", "50"],
        "purkayastha": ["--epsilon", "50"],
    }
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        src = Path(tmp) / "emb.parquet"
        t0 = time.perf_counter()
        write_input(src, args.rows, args.dim)
        size_mb = src.stat().st_size / 2**20
        print(f"input: {args.rows} x {args.dim} float32, {size_mb:.0f} MB, written in "
              f"{time.perf_counter() - t0:.0f} s\n")  # fmt: skip
        print("| mechanism | noise | peak RSS MB | rows/s | wall s |")
        print("|---|---|---|---|---|")
        key = Path(tmp) / "k.key"
        subprocess.run([sys.executable, "-m", "privembed.cli", "keygen", "-o", str(key)],
                       check=True, capture_output=True)  # fmt: skip
        for name in args.mechanisms.split(","):
            out = Path(tmp) / "out.parquet"
            base = [sys.executable, "-m", "privembed.cli", "protect", str(src), "-o", str(out),
                    "--overwrite", "--quiet", "-m", name, *params[name]]  # fmt: skip
            variants = [("fresh", [])]
            if args.keyed:
                led = Path(tmp) / "ledger.db"
                variants.append(("keyed + ledger", ["--key-file", str(key), "--ledger", str(led)]))
            for label, extra in variants:
                (Path(tmp) / "ledger.db").unlink(missing_ok=True)
                wall, peak = run_protect(base + extra)
                print(f"| {name} | {label} | {peak:.0f} | {args.rows / wall:,.0f} | {wall:.1f} |",
                      flush=True)  # fmt: skip
                out.unlink()


if __name__ == "__main__":
    main()
