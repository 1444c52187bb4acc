"""Peak memory (RSS) of ``privembed index --payloads`` and of the linkage attack, by size.

Run::

    python benchmarks/bench_memory.py                          # 10k and 100k rows, linkage
    python benchmarks/bench_memory.py --rows 10000 100000 1000000 --workdir /tmp/mem-bench

Every case runs in a child process of its own (``python bench_memory.py --child ...``) that
does the work through the command line (``privembed index`` / ``privembed attack linkage``,
in-process) and prints its ``VmHWM`` from ``/proc/self/status`` (the peak resident set size,
what an out-of-memory killer compares) at exit; the parent prints the table. Inputs are made
once in ``--workdir`` and reused:

- ``index``: ``--rows`` synthetic 384-d unit vectors shaped like MiniLM embeddings
  (``_synthetic.py``'s recipe: a shared direction, 2,000 Zipf-sized topics, noise), written as
  a Parquet file with ids in row groups of 65,536 (made a chunk at a time, so the parent never
  holds them); indexed into a FAISS store with keyed Laplace noise (epsilon 100) and sealed
  payloads, the k' profile from 200 documents standing in for queries (the default). FAISS's
  flat index holds every vector in memory (N x d float32: 1.5 GB at 1M x 384), so the cases of
  ``--half-from`` rows and more use ``--faiss-index SQfp16`` (half-precision vectors).
- ``search``: after each index with payloads, ``privembed search --query-embeddings Q.npy
  --rerank K' --json`` of ``--search-queries`` paraphrase-like queries (a document plus noise)
  for each k' of ``--depths``: the candidates' payloads fetched, opened and re-ranked exactly.
- ``linkage``: ``--victims`` protected vectors (Laplace, epsilon 100) against ``--candidates``
  clean candidates (their sources among them), ``privembed attack linkage P --candidates C``.

Peak RSS depends on the allocator and the libraries' own buffers; compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DIM = 384
CHUNK = 65536


def chunks(n: int, *, seed: int = 0, topics: int = 2000) -> Any:
    """``_synthetic.corpus``'s recipe, made and yielded a chunk at a time (float32, unit rows)."""
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal(DIM)
    shared /= np.linalg.norm(shared)
    centers = rng.standard_normal((topics, DIM))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    weights = 1.0 / np.arange(1, topics + 1)
    weights /= weights.sum()
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        t = rng.choice(topics, size=m, p=weights)
        noise = rng.standard_normal((m, DIM)) / np.sqrt(DIM)
        V = 0.27 * shared + 0.75 * centers[t] + 0.62 * noise
        yield s, (V / np.linalg.norm(V, axis=1, keepdims=True)).astype(np.float32)


def write_parquet(path: Path, n: int, *, seed: int = 0) -> Path:
    """A Parquet file of ``n`` synthetic rows (``id``: ``doc-<i>``, ``embedding``), made once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    schema = pa.schema([("id", pa.string()), ("embedding", pa.list_(pa.float32(), DIM))])
    with pq.ParquetWriter(tmp, schema) as w:
        for s, X in chunks(n, seed=seed):
            ids = pa.array([f"doc-{i}" for i in range(s, s + X.shape[0])])
            emb = pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), DIM)
            w.write_table(pa.table({"id": ids, "embedding": emb}, schema=schema))
    tmp.rename(path)
    return path


def linkage_inputs(work: Path, victims: int, candidates: int) -> tuple[Path, Path]:
    """Candidates (a Parquet file of synthetic rows) and the first ``victims`` of them
    protected with Laplace noise (epsilon 100, seed 0) under their ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from privembed import get_mechanism

    cand = write_parquet(work / f"cand-{candidates}.parquet", candidates, seed=1)
    prot = work / f"victims-{victims}-of-{candidates}.parquet"
    if not prot.exists():
        tab = pq.read_table(cand).slice(0, victims)
        X = np.asarray(tab.column("embedding").combine_chunks().values, np.float32)
        Y = get_mechanism("laplace", epsilon=100.0).privatize(X.reshape(-1, DIM), rng=0)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(np.asarray(Y, np.float32).ravel()), DIM)
        pq.write_table(pa.table({"id": tab.column("id"), "embedding": emb}), prot)
    return prot, cand


def query_file(work: Path, docs: Path, n: int) -> Path:
    """``n`` paraphrase-like queries near the first documents of ``docs`` (an .npy file)."""
    import pyarrow.parquet as pq

    out = work / f"queries-{n}-{docs.stem}.npy"
    if not out.exists():
        first = next(pq.ParquetFile(docs).iter_batches(batch_size=max(n, 1000)))
        X = np.asarray(first.column("embedding").values, np.float32).reshape(-1, DIM)
        rng = np.random.default_rng(1)
        Q = X[rng.integers(0, X.shape[0], size=n)].astype(np.float64)
        Q += 0.75 * rng.standard_normal(Q.shape) / np.sqrt(DIM)
        np.save(out, (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32))
    return out


def vmhwm() -> int:
    """This process' peak resident set size in bytes (``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(argv: list[str]) -> None:
    """Run one ``privembed`` command in this process; print its peak RSS and time as JSON."""
    from privembed.cli import app

    t = time.perf_counter()
    rc = app(argv, standalone_mode=False)
    if rc:
        raise SystemExit(rc)
    print(json.dumps({"peak": vmhwm(), "seconds": time.perf_counter() - t}))


def run_case(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", "--", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument(
        "--half-from",
        type=int,
        default=1_000_000,
        help="rows from which the FAISS index keeps half-precision vectors",
    )
    ap.add_argument("--victims", type=int, default=2000)
    ap.add_argument("--candidates", type=int, default=117_659)
    ap.add_argument("--no-linkage", action="store_true")
    ap.add_argument(
        "--search-queries",
        type=int,
        default=200,
        help="queries of the search case after each index with payloads (0: none)",
    )
    ap.add_argument(
        "--depths", type=int, nargs="+", default=[1000], help="k' of the search case (--rerank)"
    )
    ap.add_argument("--no-payloads", action="store_true", help="also index without payloads")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.rest)
        return
    work = args.workdir or Path(tempfile.mkdtemp(prefix="privembed-mem-"))
    work.mkdir(parents=True, exist_ok=True)
    key = work / "key"
    if not key.exists():
        key.write_text(bytes(range(32)).hex())
        key.chmod(0o600)
    import numpy

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, numpy {numpy.__version__}, faiss "
          f"{version('faiss-cpu')}; load: {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'case':<58} {'peak RSS MB':>12} {'seconds':>8}")
    for n in args.rows:
        src = write_parquet(work / f"docs-{n}.parquet", n)
        for payloads in [True] + ([False] if args.no_payloads else []):
            store = work / f"store-{n}-{int(payloads)}"
            if store.exists():
                import shutil

                shutil.rmtree(store)
            argv = ["index", str(src), "--store", "faiss", "--path", str(store), "-m",
                    "laplace", "-e", "100", "--key-file", str(key), "-q"]  # fmt: skip
            label = f"index {n:,} rows"
            if payloads:
                argv.append("--payloads")
                label += " --payloads"
            if n >= args.half_from:
                argv += ["--faiss-index", "SQfp16"]
                label += " (SQfp16)"
            r = run_case(argv)
            print(f"{label:<58} {r['peak'] / 1e6:>12,.0f} {r['seconds']:>8.0f}", flush=True)
            if payloads and args.search_queries:
                qf = query_file(work, src, args.search_queries)
                for depth in args.depths:
                    argv = ["search", "--store", "faiss", "--path", str(store), "--key-file",
                            str(key), "--query-embeddings", str(qf), "-k", "10", "--rerank",
                            str(depth), "--json"]  # fmt: skip
                    r = run_case(argv)
                    label = f"  search {args.search_queries:,} queries --rerank {depth:,}"
                    print(f"{label:<58} {r['peak'] / 1e6:>12,.0f} {r['seconds']:>8.0f}",
                          flush=True)  # fmt: skip
    if not args.no_linkage:
        prot, cand = linkage_inputs(work, args.victims, args.candidates)
        r = run_case(["attack", "linkage", str(prot), "--candidates", str(cand), "--json"])
        label = f"attack linkage {args.victims:,} x {args.candidates:,}"
        print(f"{label:<58} {r['peak'] / 1e6:>12,.0f} {r['seconds']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
