"""Private search with exact re-rank: latency breakdown, memory against the number of queries,
and the stores side by side.

Run::

    python benchmarks/bench_rerank.py                       # short: 20,000 records, minutes
    python benchmarks/bench_rerank.py --n 117659 --queries-list 100 2000 20000 \\
        --depths 1000 10000 --workdir /tmp/rerank-bench      # the full-size figures

Corpus: ``--n`` synthetic 384-d unit vectors with the similarity structure of sentence
embeddings (``_synthetic.py``: a shared direction, 2,000 Zipf-sized topics, noise), or real
embeddings (``--vectors corpus.npz --query-vectors queries.npz``: ``embeddings`` arrays, e.g.
dictionary sentences embedded with ``privembed embed``), protected with keyed Laplace noise
(``--epsilon``, default 200) and stored with sealed payloads (AES-256-GCM, 1,585 bytes each) in
a FAISS store; synthetic queries are paraphrase-like neighbours of random documents.

Parts (``--parts``, default latency, memory, stores):

- ``latency``: one query at a time (``--latency-queries``), each running in turn the plain
  top-10 search and the re-rank at k' = 1,000 end to end (``ProtectedCollection.query``) over
  a store of each FAISS index of ``--factories`` (default ``Flat`` and ``SQfp16``), then every
  step of the re-rank on its own: the store's candidates as arrays
  (``VectorStore.candidates``), their ids, the payloads read as one memory-mapped gather
  (``payload_block``; beside it the earlier one ``pread`` a payload), decryption and checks as
  one block (``PayloadCodec.open_block``), exact scoring and the 10 hits; p50 / p95 of wall
  and CPU time.
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
- ``gate``: compact exact vectors in payloads (float16; int8 with a scale per vector) against
  float32 on the exact top 10 of held-out queries over the whole corpus: recall of float32's
  top 10, NDCG@10 with float32's cosines as gains, identical top 10.
- ``approx``: candidates from FAISS HNSW32 against Flat on ``--approx-n`` records
  (``--approx-epsilon``): the k' that ``recall=`` (``--recall``) plans with the HNSW index's
  measured recall folded in, and whether both re-ranked top 10 agree at that k' on 30
  held-out queries.

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
from privembed.integrations.collection import ProtectedCollection

KEY = bytes(range(32))
MECH = get_mechanism("laplace", epsilon=200.0)


def build(
    path: Path, X: np.ndarray, store: str = "faiss", factory: str | None = None, mech: Any = None
) -> float:
    """Index ``X`` with payloads into ``path`` (skipped when it is there); seconds taken."""
    marker = path / ".complete"
    if marker.exists():
        return float(marker.read_text())
    t = time.perf_counter()
    opts = None if factory is None else {"factory": factory}
    with ProtectedCollection.open(store, path, "bench", mechanism=mech or MECH, key=KEY,
                                  payloads=True, store_options=opts) as col:  # fmt: skip
        for s in range(0, X.shape[0], 8192):
            col.add([f"r{i}" for i in range(s, min(s + 8192, X.shape[0]))], X[s : s + 8192])
    took = time.perf_counter() - t
    marker.write_text(f"{took:.1f}")
    return took


def _load(path: Path, n: int) -> np.ndarray:
    """The first ``n`` rows of an embeddings file (.npz with ``embeddings``, or .npy)."""
    if path.suffix == ".npz":
        with np.load(path) as z:
            return np.asarray(z["embeddings"][:n], dtype=np.float32)
    return np.asarray(np.load(path, mmap_mode="r")[:n], dtype=np.float32)


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


def _p(times: list[float]) -> str:
    a = np.asarray(times) * 1e3
    return f"{np.median(a):.1f} / {np.percentile(a, 95):.1f}"


def latency(paths: dict[str, Path], Q: np.ndarray, depth: int = 1000) -> None:
    """``paths``: FAISS index factory -> store folder (the first is the main one). Every query
    runs the plain top-10 search and the re-rank at k' = ``depth`` in turn (the same load for
    both), then each step of the re-rank on its own."""
    nq = Q.shape[0]
    with _warm_collections(paths, Q) as cols:
        main = next(iter(cols))
        rows: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}

        def clock(label: str, fn) -> Any:
            t, c = time.perf_counter(), time.process_time()
            out = fn()
            rows.setdefault(label, []).append(time.perf_counter() - t)
            cpu.setdefault(label, []).append(time.process_time() - c)
            return out

        col = cols[main]
        store, codec = col.store, col.codec
        assert codec is not None
        Qt = col.treatment.apply(Q)
        Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        kp = f"{depth:,}"
        for i in range(nq):
            q = Q[i : i + 1]
            for f, c in cols.items():
                clock(f"plain top 10 ({f})", lambda q=q, c=c: c.query(q, k=10))
                clock(f"**re-rank k' = {kp}, end to end ({f})**",
                      lambda q=q, c=c: c.query(q, k=10, rerank=depth))  # fmt: skip
            cand = clock(f"  the store's {kp} candidates ({main}, arrays)",
                         lambda i=i: store.candidates(Qt[i : i + 1], depth))  # fmt: skip
            ids = clock("  their ids", lambda cand=cand: store.candidate_ids(cand))
            block, off = clock("  payloads, one memory-mapped gather (now)",
                               lambda cand=cand: store.payload_block(cand))  # fmt: skip
            clock("  payloads, one pread each (before)", lambda ids=ids: store.payloads(ids))
            opened = clock(
                "  decryption and checks, as one block (open_block)",
                lambda b=block, o=off, ids=ids: codec.open_block(b, o, ids=ids, collection="bench"),
            )

            def score(opened=opened, cand=cand, qn=Qn[i]) -> object:
                V = opened.vectors.astype(np.float64)
                V /= np.sqrt(np.einsum("ij,ij->i", V, V))[:, None]
                row = cand.rows[0]
                exact = V[row] @ qn
                keep = np.argsort(-exact, kind="stable")[:10]
                return store.candidate_hits(cand, row[keep].tolist(), exact[keep].tolist())

            clock("  exact scoring and the 10 hits", score)
        n = store.count()
    print(f"\n## re-rank latency, one query at a time: FAISS, {n:,} records, {nq} queries\n")
    print("| step | wall ms, p50 / p95 | CPU ms of this process, p50 / p95 |")
    print("|---|---|---|")
    for label, times in rows.items():
        print(f"| {label} | {_p(times)} | {_p(cpu[label])} |")
    parts = [k for k in rows if k.startswith("  ") and "before" not in k]
    total = sum(float(np.median(rows[k])) for k in parts) * 1e3
    total_cpu = sum(float(np.median(cpu[k])) for k in parts) * 1e3
    plain = float(np.median(rows[f"plain top 10 ({main})"])) * 1e3
    e2e = float(np.median(rows[f"**re-rank k' = {kp}, end to end ({main})**"])) * 1e3
    print(f"\nsum of the steps (medians, {main}): {total:.1f} ms wall, {total_cpu:.1f} ms CPU; "
          f"re-rank minus plain search, end to end: {e2e - plain:.1f} ms")  # fmt: skip
    print(
        "A lone query runs on one thread, so its CPU time is what its wall time is on an idle "
        "core (on a shared machine the wall time also counts waiting for a core)."
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


def _top10(Qn: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Each query's top 10 rows of ``V`` by inner product, best first (queries in blocks of
    64: one (64, records) score matrix at a time)."""
    tops = []
    for s in range(0, Qn.shape[0], 64):
        S = Qn[s : s + 64] @ V.T
        part = np.argpartition(-S, 9, axis=1)[:, :10]
        order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
        tops.append(np.take_along_axis(part, order, axis=1))
    return np.concatenate(tops)


def gate(X: np.ndarray, Q: np.ndarray) -> None:
    """Compact exact vectors in payloads: the exact top 10 over the whole corpus with each
    payload precision against float32's -- recall of float32's top 10, NDCG@10 with float32's
    cosines as the gains, and the share of queries whose top 10 is identical (in order)."""
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    top = _top10(Qn, Xn)
    disc = 1.0 / np.log2(np.arange(2, 12))

    def gains(rows: np.ndarray) -> np.ndarray:  # float32's cosine of each ranked row
        return np.einsum("qd,qkd->qk", Qn, Xn[rows])

    ideal = (gains(top) * disc).sum(axis=1)
    scale = np.abs(X).max(axis=1, keepdims=True) / 127.0
    variants = {
        "float16 (2 bytes a dimension)": X.astype(np.float16).astype(np.float32),
        "int8 with a scale per vector (1 byte a dimension + 4)": np.round(X / scale) * scale,
    }
    print(f"\n## payload precision gate: exact top 10 of {Q.shape[0]:,} held-out queries over "
          f"{X.shape[0]:,} real embeddings, against float32\n")  # fmt: skip
    print("| exact vectors | recall of float32's top 10 | NDCG@10 / float32's | identical top 10 "
          "| max abs cosine error (top 10) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for name, V in variants.items():
        Vn = V / np.linalg.norm(V, axis=1, keepdims=True)
        got = _top10(Qn, Vn)
        rec = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, got, strict=True)])
        ndcg = ((gains(got) * disc).sum(axis=1) / ideal).mean()
        same = float(np.mean((top == got).all(axis=1)))
        err = float(np.abs(np.einsum("qd,qkd->qk", Qn, Vn[top]) - gains(top)).max())
        print(f"| {name} | {rec:.4f} | {ndcg:.5f} | {same:.3f} | {err:.1e} |", flush=True)
    print("\ngate: recall >= 0.99 and NDCG@10 >= 0.999 of float32's.")


@contextlib.contextmanager
def _pg_database() -> Iterator[str]:
    """``PRIVEMBED_PG_DSN``, or a temporary local PostgreSQL with pgvector (pgserver)."""
    if os.environ.get("PRIVEMBED_PG_DSN"):
        yield os.environ["PRIVEMBED_PG_DSN"]
        return
    import pgserver

    root = Path(tempfile.mkdtemp(prefix="privembed-bench-pg-"))
    server = pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def _approx_collection(kind: str, path: Path, X: np.ndarray, mech: Any, dsn: str | None) -> Any:
    """The collection of one candidate generator ("Flat", "HNSW32": FAISS; "pgvector-hnsw"),
    built once (FAISS in ``path``, pgvector in its database, its HNSW index after the load)."""
    if kind != "pgvector-hnsw":
        build(path, X, factory=None if kind == "Flat" else kind, mech=mech)
        return ProtectedCollection.open("faiss", path, "bench", key=KEY, create=False)
    opts = {"dsn": dsn}
    col = ProtectedCollection.open("pgvector", path, "bench-approx", mechanism=mech, key=KEY,
                                   payloads=True, store_options=opts)  # fmt: skip
    if col.store.count() == 0:
        for s in range(0, X.shape[0], 8192):
            col.add([f"r{i}" for i in range(s, min(s + 8192, X.shape[0]))], X[s : s + 8192])
        col.store.build_index("hnsw")  # type: ignore[attr-defined]
    return col


def approximate(
    X: np.ndarray, Q: np.ndarray, work: Path, mech: Any, recall: float, kinds: list[str]
) -> None:
    """Candidates from approximate indexes (FAISS HNSW32 with efSearch = max(256, 2 k');
    pgvector HNSW with ef_search = min(1,000, max(256, 2 k'))) against the exact Flat scan, all
    re-ranked: k' planned for ``recall`` with each index's measured recall folded in, and
    whether the re-ranked top 10 equal Flat's at that k'."""
    import faiss

    n = X.shape[0]
    took: dict[str, float] = {}
    rows = []
    threads = faiss.omp_get_max_threads()
    with contextlib.ExitStack() as stack:
        dsn = stack.enter_context(_pg_database()) if "pgvector-hnsw" in kinds else None
        faiss.omp_set_num_threads(1)  # one thread builds one HNSW graph: the run repeats
        cols = {}
        try:
            for kind in ["Flat", *[k for k in kinds if k != "Flat"]]:
                t = time.perf_counter()
                path = work / f"approx-{n}-{mech.epsilon:g}-{kind}"
                cols[kind] = stack.enter_context(_approx_collection(kind, path, X, mech, dsn))
                took[kind] = time.perf_counter() - t
        finally:
            faiss.omp_set_num_threads(threads)
        for c in cols.values():
            if c.profile_source is None:
                c.save_profile(X[:200], X, rng=0, source="documents")
        flat = cols["Flat"]
        exact_depth = flat._depth(10, None, recall, None)
        for kind, c in cols.items():
            if kind == "Flat":
                continue
            try:
                depth = c._depth(10, None, recall, None)
            except ValueError as exc:
                rows.append(f"| {kind} | {took[kind]:.0f} | refused: {exc} | | | |")
                continue
            r = c._search_recall(depth)
            times: dict[str, list[float]] = {"Flat": [], kind: []}
            same = 0
            for i in range(Q.shape[0]):
                tops = {}
                for name, col in (("Flat", flat), (kind, c)):
                    t = time.perf_counter()
                    tops[name] = [h.id for h in col.query(Q[i], k=10, rerank=depth)[0]]
                    times[name].append(time.perf_counter() - t)
                same += tops["Flat"] == tops[kind]
            rows.append(f"| {kind} | {took[kind]:.0f} | {r:.4f} | {depth:,} | {_p(times[kind])} "
                        f"(Flat: {_p(times['Flat'])}) | {same} of {Q.shape[0]} |")  # fmt: skip
    print(f"\n## approximate candidates: {n:,} records, Laplace epsilon {mech.epsilon:g}, "
          f"recall target {recall}, {Q.shape[0]} held-out queries\n")  # fmt: skip
    print(f"k' planned for the exact (Flat) index: {exact_depth:,}; an approximate index's k' "
          "is planned for target / its measured recall of the exact top k'\n")  # fmt: skip
    print("| candidates | build s | measured recall of the exact top k' | k' | re-rank at k' ms, "
          "p50 / p95 | re-ranked top 10 = Flat's at that k' |")  # fmt: skip
    print("|---|---:|---:|---:|---|---|")
    for row in rows:
        print(row)
    print("\nmust-show: >= 29 of 30")


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
    ap.add_argument("--vectors", type=Path, default=None,
                    help="real embeddings (.npz with 'embeddings', or .npy): the first --n rows")  # fmt: skip
    ap.add_argument("--query-vectors", type=Path, default=None,
                    help="real held-out query embeddings (same formats)")  # fmt: skip
    ap.add_argument("--epsilon", type=float, default=200.0, help="Laplace epsilon of the store")
    ap.add_argument("--approx-n", type=int, default=20_000, help="records of the approx part")
    ap.add_argument("--approx-epsilon", type=float, default=None,
                    help="Laplace epsilon of the approx part (default --epsilon)")  # fmt: skip
    ap.add_argument("--recall", type=float, default=0.9, help="target of the approx part")
    ap.add_argument("--approx-indexes", nargs="+", default=["HNSW32"],
                    help="approximate candidate generators: HNSW32 (FAISS), pgvector-hnsw")  # fmt: skip
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
    global MECH
    MECH = get_mechanism("laplace", epsilon=args.epsilon)
    if args.vectors is not None:
        X = _load(args.vectors, args.n)
        print(f"corpus: {X.shape[0]:,} x {X.shape[1]} real embeddings from {args.vectors}")
        tag = f"real-{X.shape[0]}-{args.epsilon:g}"
    else:
        X = _synthetic.corpus(args.n)
        print(f"corpus: {args.n:,} x {X.shape[1]} synthetic unit vectors "
              f"({_synthetic.describe(X)})")  # fmt: skip
        tag = f"{args.n}" if args.epsilon == 200.0 else f"{args.n}-{args.epsilon:g}"

    def queries(count: int, seed: int) -> np.ndarray:
        if args.query_vectors is not None:
            return _load(args.query_vectors, count)
        return _synthetic.queries(X, count, seed=seed)

    print(f"protection: Laplace epsilon {args.epsilon:g}, keyed; queries: "
          f"{args.query_vectors or 'paraphrase-like neighbours of documents'}")  # fmt: skip
    path = work / f"faiss-{tag}"
    if {"latency", "memory"} & set(args.parts):
        took = build(path, X)
        size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
        print(f"FAISS store with payloads: built in {took:.0f} s, {size / 2**20:.0f} MiB on disk "
              f"({size / (X.nbytes):.2f}x the float32 vectors)")  # fmt: skip
    if "latency" in args.parts:
        paths = {}
        for f in args.factories:
            p = path if f == "Flat" else work / f"faiss-{tag}-{f}"
            if f != "Flat":
                took = build(p, X, factory=f)
                size = sum(q.stat().st_size for q in p.iterdir() if q.is_file())
                print(f"FAISS store ({f}) with payloads: built in {took:.0f} s, "
                      f"{size / 2**20:.0f} MiB on disk")  # fmt: skip
            paths[f] = p
        latency(paths, queries(args.latency_queries, 3))
    if "e2e" in args.parts:
        paths = {f: path if f == "Flat" else work / f"faiss-{tag}-{f}" for f in args.factories}
        for f, p in paths.items():
            build(p, X, factory=None if f == "Flat" else f)
        end_to_end(paths, queries(args.latency_queries, 5))
    if "gate" in args.parts:
        gate(X, queries(max(args.latency_queries, 1000), 6))
    if "approx" in args.parts:
        eps = args.approx_epsilon or args.epsilon
        Qa = queries(args.latency_queries + 30, 9)[-30:]
        approximate(X[: args.approx_n], Qa, work, get_mechanism("laplace", epsilon=eps),
                    args.recall, args.approx_indexes)  # fmt: skip
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
