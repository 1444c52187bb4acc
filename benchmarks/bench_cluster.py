"""Several writers into one pgvector collection with one ledger: throughput per writer and the
ledger's cost per batch (issue 38.5).

Run: python benchmarks/bench_cluster.py                   (100,000 records, 1 and 2 writers)
     python benchmarks/bench_cluster.py --n 20000 --ray   (also the Ray engine, local instance)
Options: --n, --dim 384, --shards 4, --batch-rows 4096, --writers 1,2, --partitions 8,
         --ledger sqlite,postgres

The database is ``PRIVEMBED_PG_DSN`` if set, else a temporary local PostgreSQL with pgvector
started for the run (pgserver, the dev extra) and removed after it. Synthetic MiniLM-shaped rows
(unit vectors in 384 dimensions) are written to ``--shards`` Parquet shards; each case then runs
:func:`privembed.integrations.cluster_index.index_cluster` into a new hash-partitioned
collection (keyed Laplace, epsilon 200, sealed float32 payloads) with a new ledger -- a SQLite
file, or a PostgreSQL ledger in a database of the same server -- and again over the same data
(every record a free re-release: what a retry costs). It prints per case: the wall seconds of
the writing phase, rows/s over all writers and per writer (each writer's rows over its own
protect + seal + upsert seconds), and the ledger's cost per batch: the driver's accounting
(keyed tags of the batch) and the one commit spread over the batches.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from privembed import get_mechanism
from privembed.data.io import write_embeddings
from privembed.integrations.cluster_index import index_cluster


@contextlib.contextmanager
def _server() -> Iterator[tuple[str, Any]]:
    """(dsn, a function from a database name to its URL): ``PRIVEMBED_PG_DSN``, or a temporary
    local server."""
    if os.environ.get("PRIVEMBED_PG_DSN"):
        dsn = os.environ["PRIVEMBED_PG_DSN"]
        yield dsn, None
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    root = Path(tempfile.mkdtemp(prefix="privembed-bench-cluster-"))
    server = pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield str(server.get_uri()), server
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def _new_database(server: Any, dsn: str, name: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return str(server.get_uri(name))


def _shards(folder: Path, n: int, dim: int, shards: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir()
    cuts = np.linspace(0, n, shards + 1).astype(int)
    for j in range(shards):
        a, b = int(cuts[j]), int(cuts[j + 1])
        X = rng.standard_normal((b - a, dim)).astype(np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        write_embeddings(folder / f"part-{j:03d}.parquet", X,
                         ids=[f"rec-{i:08d}" for i in range(a, b)],
                         metadata={"embedding_model": "synthetic-384"})  # fmt: skip


def _load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _row(case: str, out: dict[str, Any]) -> str:
    w = out["writers"]
    per = " / ".join(f"{x['rows_per_second']:,.0f}" for x in w)
    led = out["ledger"]
    acc = np.asarray(led["account_ms"]) if led else np.zeros(0)
    nb = max(1, len(acc))
    commit = led["commit_ms"] if led else 0.0
    return (
        f"| {case} | {out['rows']:,} | {len(w)} | {out['seconds']:.1f} | "
        f"{out['rows'] / out['seconds']:,.0f} | {per} | "
        + (
            f"{np.median(acc):.1f} / {np.percentile(acc, 90):.1f} | {commit:,.0f} | "
            f"{commit / nb:.1f} | {(acc.sum() + commit) / nb:.1f} | {led['fresh']:,} |"
            if led
            else "- | - | - | - | - |"
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--batch-rows", type=int, default=4096)
    ap.add_argument("--writers", default="1,2")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--ledger", default="sqlite", help="sqlite, postgres or both (comma)")
    ap.add_argument("--ray", action="store_true", help="also the Ray engine (local instance)")
    args = ap.parse_args()
    import pyarrow
    import ray

    print(
        f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}, numpy {np.__version__}, pyarrow "
        f"{pyarrow.__version__}, ray {ray.__version__}"
    )
    print(f"# load before: {_load()}")
    key = bytes(range(32))
    mech = get_mechanism("laplace", epsilon=200.0)
    writers = [int(w) for w in args.writers.split(",")]
    ledgers = args.ledger.split(",")
    header = (
        "| case | rows | writers | write s | rows/s (all) | rows/s per writer | ledger account "
        "ms per batch (p50 / p90) | ledger commit ms | commit ms per batch | ledger ms per "
        "batch | fresh |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = []
    with _server() as (dsn, server), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shards = root / "shards"
        _shards(shards, args.n, args.dim, args.shards)
        cases = [("local", w, led) for led in ledgers for w in writers]
        if args.ray:
            cases += [("ray", w, ledgers[0]) for w in writers]
        for i, (engine, w, led) in enumerate(cases):
            url = _new_database(server, dsn, f"bench_{i}") if server else dsn
            if led == "postgres":
                ledger: Any = _new_database(server, dsn, f"ledger_{i}") if server else dsn
            else:
                ledger = root / f"ledger-{i}.db"
            if engine == "ray" and not ray.is_initialized():  # once, outside the timings
                t0 = time.perf_counter()
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
                print(f"# ray.init: {time.perf_counter() - t0:.1f} s", flush=True)
            for run in ("first", "again"):
                t0 = time.perf_counter()
                out = index_cluster(
                    shards, url, f"bench_{i}", mech, key=key, path=root / f"c{i}",
                    writers=w, engine=engine, partitions=args.partitions, ledger=ledger,
                    batch_rows=args.batch_rows,
                )  # fmt: skip
                total = time.perf_counter() - t0
                assert out["count"] == args.n, out["count"]
                case = f"{engine}, {led} ledger, {run} (call {total:.0f} s)"
                lines.append(_row(case, out))
                print(lines[-1], flush=True)
    print()
    print(header)
    print("\n".join(lines))
    if ray.is_initialized():
        ray.shutdown()
    print(f"\n# load after: {_load()}")


if __name__ == "__main__":
    main()
