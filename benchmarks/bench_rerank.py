"""Private search with exact re-rank: latency breakdown, memory against the number of queries,
and the stores side by side.

Run::

    python benchmarks/bench_rerank.py                       # short: 20,000 records, minutes
    python benchmarks/bench_rerank.py --n 117659 --queries-list 100 2000 20000 \\
        --depths 1000 10000 --workdir /tmp/rerank-bench      # the full-size figures

Corpus: ``--n`` synthetic 384-d unit vectors with the similarity structure of sentence
embeddings (``_synthetic.py``: a shared direction, 2,000 Zipf-sized topics, noise), protected
with keyed Laplace noise (epsilon 200) and stored with sealed payloads (AES-256-GCM, 1,585 bytes
each) in a FAISS store; queries are paraphrase-like neighbours of random documents. Memory and
latency do not depend on what the vectors mean, so synthetic vectors stand in for embedded text.

Parts (``--parts``, default all):

- ``latency``: one query at a time (``--latency-queries`` queries after the store is open,
  median and p90 in ms): plain search (k = 10) and search with exact re-rank at k' = 100 and
  1,000, end to end through ``ProtectedCollection.query``, over a store of each FAISS index of
  ``--factories`` (default ``Flat`` and ``SQfp16``, half-precision vectors); and for k' =
  1,000 the breakdown -- the store's search (``FaissStore.search(..., with_payloads=False)``,
  on one FAISS thread as the store runs a lone query, and on FAISS's default threads as
  before), the payload fetch by id (``FaissStore.payloads``), decryption one by one
  (``PayloadCodec.open_many``, before) and as one batch (``PayloadCodec.open_batch``, now) and
  exact scoring.
- ``e2e``: the end-to-end re-rank at k' = 1,000 alone over each index of ``--factories``,
  alternating which goes first, and whether their re-ranked top 10 agree.
- ``memory``: ``privembed search --query-embeddings Q.npy --rerank K' --json`` in a child
  process, for each number of queries (``--queries-list``) and k' (``--depths``): peak RSS
  (the child's ru_maxrss, started from a small launcher) and wall time; plus the RSS of opening the store alone.
- ``ab`` (with ``--baseline-src``, e.g. a checkout of the code before this change): the same
  end-to-end re-rank (k' = 1,000, one query at a time) in two worker processes, this code and
  the baseline, each over its own copy of the store (built by its own code), the queries sent
  to them alternately so both see the same load; the median of the per-query ratio.
- ``stores``: plain k = 10 and re-rank k' = 100 / 1,000 latency through Chroma (embedded),
  Qdrant (local mode) and FAISS, on ``--store-n`` records (Qdrant's local mode is a brute-force
  scan in Python: keep it small).

The store is built once in ``--workdir`` (default: a temporary folder) and reused when the
folder already holds it. Compare ratios measured in one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import _synthetic
import numpy as np

from privembed import get_mechanism
from privembed.integrations import stores as store_mod
from privembed.integrations.collection import ProtectedCollection

KEY = bytes(range(32))
MECH = get_mechanism("laplace", epsilon=200.0)


def build(path: Path, X: np.ndarray, store: str = "faiss", factory: str | None = None) -> float:
    """Index ``X`` with payloads into ``path`` (skipped when it is there); seconds taken."""
    marker = path / ".complete"
    if marker.exists():
        return float(marker.read_text())
    t = time.perf_counter()
    opts = None if factory is None else {"factory": factory}
    with ProtectedCollection.open(store, path, "bench", mechanism=MECH, key=KEY,
                                  payloads=True, store_options=opts) as col:  # fmt: skip
        for s in range(0, X.shape[0], 8192):
            col.add([f"r{i}" for i in range(s, min(s + 8192, X.shape[0]))], X[s : s + 8192])
    took = time.perf_counter() - t
    marker.write_text(f"{took:.1f}")
    return took


def _stats(times: list[float]) -> str:
    a = np.asarray(times) * 1e3
    return f"{np.median(a):.1f} / {np.percentile(a, 90):.1f}"


@contextlib.contextmanager
def _warm_collections(paths: dict[str, Path], Q: np.ndarray) -> Iterator[dict[str, Any]]:
    """The stores of ``paths`` (FAISS index factory -> folder) opened, each warmed by a re-rank
    of two queries (its index and payload file in the page cache), closed afterwards."""
    cols: dict[str, Any] = {}
    try:
        for f, p in paths.items():
            cols[f] = ProtectedCollection.open("faiss", p, "bench", key=KEY, create=False)
            cols[f].query(Q[:2], k=10, rerank=1000)
        yield cols
    finally:
        for c in cols.values():
            c.close()


def latency(paths: dict[str, Path], Q: np.ndarray) -> None:
    """``paths``: FAISS index factory -> store folder (the first is the main one)."""
    import faiss

    nq = Q.shape[0]
    with _warm_collections(paths, Q) as cols:
        main = next(iter(cols))
        rows: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}

        def clock(label: str, fn) -> object:
            t, c = time.perf_counter(), time.process_time()
            out = fn()
            rows.setdefault(label, []).append(time.perf_counter() - t)
            cpu.setdefault(label, []).append(time.process_time() - c)
            return out

        Qt = cols[main].treatment.apply(Q)
        default_threads = faiss.omp_get_max_threads()
        for i in range(nq):  # every variant once per query, in turn: the same load for all
            q = Q[i : i + 1]
            col = cols[main]
            clock("plain k = 10", lambda q=q, col=col: col.query(q, k=10))
            clock("re-rank k' = 100", lambda q=q, col=col: col.query(q, k=10, rerank=100))
            for f, c in cols.items():
                clock(f"re-rank k' = 1,000, end to end ({f})",
                      lambda q=q, c=c: c.query(q, k=10, rerank=1000))  # fmt: skip
            for f, c in cols.items():
                clock(
                    f"  the store's search, 1 FAISS thread ({f})",
                    lambda i=i, c=c: c.store.search(Qt[i : i + 1], 1000, with_payloads=False)[0],
                )
            store, codec = col.store, col.codec
            assert codec is not None
            before = store_mod.FAISS_ONE_THREAD_BELOW
            store_mod.FAISS_ONE_THREAD_BELOW = 0  # the store as it was: FAISS's own threads
            try:
                hits = clock(
                    f"  the store's search, {default_threads} FAISS threads (Flat, before)",
                    lambda i=i, store=store: store.search(Qt[i : i + 1], 1000, with_payloads=False)[
                        0
                    ],
                )
            finally:
                store_mod.FAISS_ONE_THREAD_BELOW = before
            ids = [h.id for h in hits]
            blobs = clock("  payload fetch by id", lambda ids=ids, s=store: s.payloads(ids))
            clock(
                "  decryption and checks, one by one (before)",
                lambda b=blobs, ids=ids, c=codec: c.open_many(b, ids=ids, collection="bench"),
            )
            opened = clock(
                "  decryption and checks, as one batch (now)",
                lambda b=blobs, ids=ids, c=codec: c.open_batch(b, ids=ids, collection="bench"),
            )

            def score(opened=opened, q=q) -> object:
                V = opened.vectors.astype(np.float64)
                V /= np.linalg.norm(V, axis=1, keepdims=True)
                qn = q[0] / np.linalg.norm(q[0])
                return np.argsort(-(V @ qn), kind="stable")[:10]

            clock("  exact scoring", score)
        n = cols[main].store.count()
    print(f"\n## re-rank latency, one query at a time: FAISS, {n:,} records, {nq} queries\n")
    print("| step | wall ms, median / p90 | CPU ms of this process, median / p90 |")
    print("|---|---|---|")
    for label, times in rows.items():
        print(f"| {label} | {_stats(times)} | {_stats(cpu[label])} |")
    for f in cols:
        parts = [f"  the store's search, 1 FAISS thread ({f})", "  payload fetch by id",
                 "  decryption and checks, as one batch (now)", "  exact scoring"]  # fmt: skip
        total = sum(float(np.median(rows[k])) for k in parts) * 1e3
        total_cpu = sum(float(np.median(cpu[k])) for k in parts) * 1e3
        print(f"\nsum of the k' = 1,000 steps with the {f} index (medians): {total:.1f} ms wall, "
              f"{total_cpu:.1f} ms CPU")  # fmt: skip
    print(
        "the rest of the end-to-end time is building hits and the query treatment. A lone "
        "query runs on one thread, so its CPU time is what its wall time is on an idle core "
        "(on a shared machine the wall time also counts waiting for a core)."
    )


def end_to_end(paths: dict[str, Path], Q: np.ndarray) -> None:
    """Re-rank at k' = 1,000 end to end over each store, nothing else timed between (no FAISS
    threads left spinning by another variant), the stores alternating first; and whether their
    re-ranked top 10 agree."""
    nq = Q.shape[0]
    with _warm_collections(paths, Q) as cols:
        times: dict[str, list[float]] = {f: [] for f in cols}
        tops: dict[str, list[list[str]]] = {f: [] for f in cols}
        for i in range(nq):
            for f in list(cols) if i % 2 == 0 else list(cols)[::-1]:
                t = time.perf_counter()
                hits = cols[f].query(Q[i : i + 1], k=10, rerank=1000)[0]
                times[f].append(time.perf_counter() - t)
                tops[f].append([h.id for h in hits])
    first = next(iter(cols))
    print(f"\n## re-rank k' = 1,000 end to end, stores alternating, {nq} queries\n")
    print(f"| FAISS index | wall ms, median / p90 | re-ranked top 10 identical to {first}'s |")
    print("|---|---|---|")
    for f in cols:
        same = sum(a == b for a, b in zip(tops[f], tops[first], strict=True))
        print(f"| {f} | {_stats(times[f])} | {same} of {nq} |")


#: runs argv[2:] and writes its peak RSS (KiB) to argv[1]. A child forked from a large process
#: inherits that process' high-water mark into its ru_maxrss (Linux keeps it across exec), so
#: the measured command is started from this small launcher instead of from the benchmark.
LAUNCHER = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(rc)"
)


def _peak_rss(cmd: list[str], stdout: object = subprocess.DEVNULL) -> tuple[float, float, int]:
    """(peak RSS MiB, wall s, exit status) of a command, started from a small launcher."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as res:
        t = time.perf_counter()
        rc = subprocess.call([sys.executable, "-c", LAUNCHER, res.name, *cmd], stdout=stdout)
        wall = time.perf_counter() - t
        return int(res.read() or 0) / 1024, wall, rc


def memory(path: Path, X: np.ndarray, work: Path, counts: list[int], depths: list[int]) -> None:
    keyfile = work / "bench.key"
    keyfile.write_text(KEY.hex() + "\n")
    keyfile.chmod(0o600)
    cli = [sys.executable, "-m", "privembed.cli", "search", "--store", "faiss", "--path",
           str(path), "--collection", "bench", "--key-file", str(keyfile), "-k", "10", "--json"]  # fmt: skip
    opener = [sys.executable, "-c", "from privembed.integrations.stores import FaissStore; "
              f"s = FaissStore({str(path)!r}, 'bench', create=False); print(s.count())"]  # fmt: skip
    rss_open, wall_open, _ = _peak_rss(opener)
    print(f"\n## search memory: privembed search --rerank K' --json, {X.shape[0]:,} records\n")
    print(f"opening the store alone: peak RSS {rss_open:.0f} MiB ({wall_open:.1f} s)\n")
    from privembed.search.rerank import query_batch_size

    print("| queries | k' | queries per batch | peak RSS MiB | wall s | s per query |")
    print("|---|---|---|---|---|---|")
    # cheapest first: the long runs come last, every row printed as it finishes
    for nq, kp in sorted(itertools.product(counts, depths), key=lambda p: (p[0] * p[1], p[1])):
        qfile = work / f"q{nq}.npy"
        if not qfile.exists():
            np.save(qfile, _synthetic.queries(X, nq, seed=nq))

        batch = query_batch_size(kp, X.shape[1])
        result = work / f"out-{nq}-{kp}-{os.getpid()}.jsonl"
        with open(result, "wb") as out:
            rss, wall, rc = _peak_rss([*cli, "--query-embeddings", str(qfile),
                                       "--rerank", str(kp)], stdout=out)  # fmt: skip
        with open(result, "rb") as fh:
            lines = sum(1 for _ in fh)
        result.unlink()
        ok = "" if rc == 0 and lines == nq else f" (exit {rc}, {lines} lines)"
        print(f"| {nq:,} | {kp:,} | {batch} | {rss:.0f}{ok} | {wall:.0f} | {wall / nq:.3f} |",
              flush=True)  # fmt: skip


WORKER = """
import sys, time, numpy as np
sys.path.insert(0, sys.argv[4])
import _synthetic
from pathlib import Path
from privembed import get_mechanism
from privembed.integrations.collection import ProtectedCollection
path, n, qfile = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
key = bytes(range(32))
if not (path / ".complete").exists():
    X = _synthetic.corpus(n)
    with ProtectedCollection.open("faiss", path, "bench", key=key, payloads=True,
                                  mechanism=get_mechanism("laplace", epsilon=200.0)) as col:
        for s in range(0, n, 8192):
            col.add([f"r{i}" for i in range(s, min(s + 8192, n))], X[s : s + 8192])
    (path / ".complete").write_text("ab")
Q = np.load(qfile)
col = ProtectedCollection.open("faiss", path, "bench", key=key, create=False)
col.query(Q[:2], k=10, rerank=1000)
print("ready", flush=True)
for line in sys.stdin:
    i = int(line)
    t, c = time.perf_counter(), time.process_time()
    hits = col.query(Q[i], k=10, rerank=1000)[0]
    print(time.perf_counter() - t, time.process_time() - c, hits[0].id, flush=True)
"""


def ab(n: int, work: Path, baseline_src: Path, nq: int) -> None:
    """End-to-end re-rank latency of this code against ``baseline_src``, interleaved."""
    qfile = work / f"ab-q{nq}.npy"
    np.save(qfile, _synthetic.queries(_synthetic.corpus(n), nq, seed=5))
    here = Path(__file__).resolve().parent
    src = Path(sys.modules["privembed"].__file__).resolve().parents[1]
    workers = {}
    for name, path in (("this code", src), ("baseline", baseline_src.resolve())):
        env = {**os.environ, "PYTHONPATH": str(path)}
        store = work / f"ab-{name.replace(' ', '-')}-{n}"
        workers[name] = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(store), str(n), str(qfile), str(here)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
    for w in workers.values():
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in workers}
    same = 0
    for i in range(nq):
        top = {}
        for name in list(workers)[i % 2 :] + list(workers)[: i % 2]:  # alternate who goes first
            w = workers[name]
            assert w.stdin is not None and w.stdout is not None
            w.stdin.write(f"{i}\n")
            w.stdin.flush()
            wall, cpu, top[name] = w.stdout.readline().split()
            res[name].append((float(wall), float(cpu)))
        same += len(set(top.values())) == 1
    for w in workers.values():
        assert w.stdin is not None
        w.stdin.close()
        w.wait()
    a, b = np.array(res["this code"]), np.array(res["baseline"])
    print(f"\n## re-rank k' = 1,000 end to end, this code vs {baseline_src}: {n:,} records, "
          f"{nq} queries sent alternately\n")  # fmt: skip
    print("| code | wall ms, median / p90 | CPU ms, median / p90 |")
    print("|---|---|---|")
    for name, r in (("this code", a), ("baseline", b)):
        print(f"| {name} | {_stats(list(r[:, 0]))} | {_stats(list(r[:, 1]))} |")
    print(f"\nmedian per-query ratio this / baseline: wall {np.median(a[:, 0] / b[:, 0]):.2f}, "
          f"CPU {np.median(a[:, 1] / b[:, 1]):.2f}; same top hit for {same} of {nq} queries")  # fmt: skip


def stores(n: int, work: Path, names: list[str], nq: int) -> None:
    X = _synthetic.corpus(n, seed=7)
    Q = _synthetic.queries(X, nq, seed=8)
    print(f"\n## the stores side by side: {n:,} records, {nq} queries one at a time\n")
    print("| store | index s | plain k = 10 ms | re-rank k' = 100 ms | re-rank k' = 1,000 ms |")
    print("|---|---|---|---|---|")
    for name in names:
        path = work / f"store-{name}-{n}"
        took = build(path, X, name)
        with ProtectedCollection.open(name, path, "bench", key=KEY, create=False) as col:
            col.query(Q[:1], k=10, rerank=1000)
            t: dict[int, list[float]] = {}
            for i in range(nq):
                for depth in (0, 100, 1000):
                    s = time.perf_counter()
                    col.query(Q[i], k=10, rerank=depth or None)
                    t.setdefault(depth, []).append(time.perf_counter() - s)
        print(f"| {name} | {took:.0f} | {_stats(t[0])} | {_stats(t[100])} | {_stats(t[1000])} |",
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000, help="records (full size: 117659)")
    ap.add_argument("--parts", nargs="+", default=["latency", "memory", "stores"])
    ap.add_argument("--latency-queries", type=int, default=50)
    ap.add_argument("--queries-list", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--depths", type=int, nargs="+", default=[1000])
    ap.add_argument("--stores", nargs="+", default=["faiss", "chroma", "qdrant"])
    ap.add_argument("--store-n", type=int, default=10_000)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--baseline-src", type=Path, default=None, help="src of the code to compare")
    ap.add_argument("--factories", nargs="+", default=["Flat", "SQfp16"],
                    help="FAISS indexes to time the re-rank over (the first is the main store)")  # fmt: skip
    args = ap.parse_args()
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory()
        work = Path(tmp.name)
    else:
        work = args.workdir
        work.mkdir(parents=True, exist_ok=True)
    import faiss

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
        f"average {os.getloadavg()[0]:.1f} at the start; python {platform.python_version()}, "
        f"numpy {np.__version__}, faiss {faiss.__version__}, cryptography "
        f"{version('cryptography')}"
    )
    X = _synthetic.corpus(args.n)
    print(f"corpus: {args.n:,} x {X.shape[1]} synthetic unit vectors ({_synthetic.describe(X)})")
    path = work / f"faiss-{args.n}"
    if {"latency", "memory"} & set(args.parts):
        took = build(path, X)
        size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
        print(f"FAISS store with payloads: built in {took:.0f} s, {size / 2**20:.0f} MiB on disk "
              f"({size / (X.nbytes):.2f}x the float32 vectors)")  # fmt: skip
    if "latency" in args.parts:
        paths = {}
        for f in args.factories:
            p = path if f == "Flat" else work / f"faiss-{args.n}-{f}"
            if f != "Flat":
                took = build(p, X, factory=f)
                size = sum(q.stat().st_size for q in p.iterdir() if q.is_file())
                print(f"FAISS store ({f}) with payloads: built in {took:.0f} s, "
                      f"{size / 2**20:.0f} MiB on disk")  # fmt: skip
            paths[f] = p
        latency(paths, _synthetic.queries(X, args.latency_queries, seed=3))
    if "e2e" in args.parts:
        paths = {f: path if f == "Flat" else work / f"faiss-{args.n}-{f}" for f in args.factories}
        for f, p in paths.items():
            build(p, X, factory=None if f == "Flat" else f)
        end_to_end(paths, _synthetic.queries(X, args.latency_queries, seed=5))
    if "memory" in args.parts:
        memory(path, X, work, args.queries_list, args.depths)
    if "ab" in args.parts and args.baseline_src is not None:
        ab(args.n, work, args.baseline_src, args.latency_queries)
    if "stores" in args.parts:
        stores(args.store_n, work, args.stores, args.latency_queries)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
