"""Integrations benchmark: Parquet shards (Ray vs one process), Chroma index/search, ranking.

Three parts, each printing a table (``--part`` picks one; default: all):

* ``shards`` -- protect ``--n`` x ``--d`` float32 vectors (keyed Gaussian, epsilon 5) written as
  ``--shards`` Parquet files, with the single-process engine and with Ray Data on
  ``--num-cpus`` CPUs. Reports wall time, throughput and peak memory. Peak memory is the
  largest *sum of PSS* (proportional set size, so pages shared with Ray's object store are not
  counted twice) over this process and all its descendants (Ray's raylet, GCS and workers),
  sampled every 0.25 s from ``/proc`` (Linux only). Ray's start-up (``ray.init``) is timed
  separately from the job. Both engines' outputs are checked to be bit-identical.
* ``chroma`` -- index throughput (protect + upsert, vectors/s) and search throughput
  (queries/s, k=10, query treatment included) of an embedded Chroma collection; FAISS (flat,
  one file) alongside for scale.
* ``storage`` -- bytes per record on disk of each store (Chroma, Qdrant local mode, FAISS)
  with and without sealed payloads, ``--n-store`` synthetic 384-d records (``_synthetic.py``)
  protected with keyed Laplace noise, and the peak RSS of a process that opens the store and
  counts it; FAISS also in its earlier layout (layout 1: payloads as base64 in fixed-width
  metadata strings), written from the same records.
* ``ranking`` -- the evidence behind the query side's choice of cosine (see
  :mod:`privembed.integrations.query`): recall@10 of protected search against the clean top-10,
  inner product vs cosine, clustered synthetic data.

Usage (the full size of the issue; ~1.5 GB of Parquet in ``--workdir``)::

    python benchmarks/bench_integrations.py --part shards --n 1000000 --num-cpus 2
    python benchmarks/bench_integrations.py --part chroma --n-index 20000
    python benchmarks/bench_integrations.py --part ranking
    python benchmarks/bench_integrations.py --part storage --n-store 117659

Set ``RAY_AUTH_MODE=disabled`` to skip Ray's token set-up for the throwaway local cluster.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

from privembed import get_mechanism
from privembed.data.io import write_embeddings
from privembed.integrations.shards import protect_shards
from privembed.release import protect

KEY = bytes(range(32))


# ---- memory: PSS of this process tree, from /proc -------------------------------------------
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _tree_pss_bytes(root: int) -> int:
    kids = _children()
    todo, total = [root], 0
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


class PeakMemory:
    """Sample the PSS of this process tree every ``interval`` seconds; keep the peak."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_pss_bytes(os.getpid()))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self.peak = _tree_pss_bytes(os.getpid())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _tree_pss_bytes(os.getpid()))


# ---- machine ----------------------------------------------------------------------------------
def machine() -> str:
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln),
        platform.processor(),
    )
    mem = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal"))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    libs = []
    for name in ("numpy", "pyarrow", "ray", "chromadb", "qdrant-client", "faiss-cpu"):
        try:
            libs.append(f"{name} {version(name)}")
        except Exception:
            libs.append(f"{name} -")
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {mem / 2**20:.0f} GiB RAM, load average {load} "
        f"(1/5/15 min; the machine is shared); Python {platform.python_version()}; "
        + ", ".join(libs)
    )


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.stdout.flush()


# ---- part 1: shards -----------------------------------------------------------------------
def make_shards(folder: Path, n: int, d: int, shards: int) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    per = -(-n // shards)
    t = time.perf_counter()
    for j in range(shards):
        a, b = j * per, min(n, (j + 1) * per)
        X = rng.standard_normal((b - a, d), dtype=np.float32)
        write_embeddings(folder / f"part-{j:03d}.parquet", X, ids=np.arange(a, b))
    return time.perf_counter() - t


def _outputs_equal(a: Path, b: Path) -> bool:
    import pyarrow.dataset as pds

    def load(p: Path) -> tuple[np.ndarray, np.ndarray]:
        t = pds.dataset(str(p), format="parquet").to_table(columns=["id", "embedding"])
        ids = t.column("id").to_numpy()
        emb = t.column("embedding").combine_chunks()
        X = emb.flatten().to_numpy().reshape(len(ids), -1)
        order = np.argsort(ids)
        return ids[order], X[order]

    ia, xa = load(a)
    ib, xb = load(b)
    return bool(np.array_equal(ia, ib) and np.array_equal(xa, xb))


def part_shards(args: argparse.Namespace, work: Path) -> None:
    src = work / "shards"
    gen = make_shards(src, args.n, args.d, args.shards)
    mb = sum(p.stat().st_size for p in src.iterdir()) / 2**20
    print(
        f"\nwrote {args.n} x {args.d} float32 in {args.shards} shards ({mb:.0f} MiB) in {gen:.1f} s"
    )
    mech = get_mechanism("gaussian", epsilon=5.0, delta=1e-5)
    rows = []

    with PeakMemory() as mem:
        t = time.perf_counter()
        protect_shards(src, work / "out-local", mech, key=KEY, batch_rows=args.batch_rows)
        wall = time.perf_counter() - t
    rows.append(
        [
            "single process (engine=local)",
            "-",
            f"{wall:.1f}",
            f"{args.n / wall:,.0f}",
            f"{mem.peak / 2**20:,.0f}",
        ]
    )

    import ray

    with PeakMemory() as mem:
        t0 = time.perf_counter()
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
        init = time.perf_counter() - t0
        t = time.perf_counter()
        protect_shards(
            src, work / "out-ray", mech, key=KEY, engine="ray", batch_rows=args.batch_rows
        )
        wall = time.perf_counter() - t
        ray.shutdown()
    rows.append(
        [
            f"Ray Data, {args.num_cpus} CPUs (engine=ray)",
            f"{init:.1f}",
            f"{wall:.1f}",
            f"{args.n / wall:,.0f}",
            f"{mem.peak / 2**20:,.0f}",
        ]
    )
    same = _outputs_equal(work / "out-local", work / "out-ray")
    table(
        f"Protecting {args.n:,} x {args.d} float32 from {args.shards} Parquet shards "
        f"(keyed Gaussian, epsilon=5; batch {args.batch_rows} rows)",
        ["engine", "ray.init s", "job s", "rows/s (job)", "peak PSS MiB (all processes)"],
        rows,
    )
    print(f"\noutputs bit-identical: {same}")


# ---- part 2: chroma -------------------------------------------------------------------------
def part_chroma(args: argparse.Namespace, work: Path) -> None:
    from privembed.integrations.collection import ProtectedCollection

    n, d, nq = args.n_index, args.d, args.n_queries
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, d), dtype=np.float32)
    Q = X[:nq] + 0.05 * rng.standard_normal((nq, d), dtype=np.float32)
    ids = [f"r{i}" for i in range(n)]
    mech = get_mechanism("gaussian", epsilon=50.0, delta=1e-5)
    rows = []
    for store in ("chroma", "faiss"):
        with ProtectedCollection.open(store, work / store, "bench", mechanism=mech, key=KEY) as c:
            t = time.perf_counter()
            for s in range(0, n, 4096):
                c.add(ids[s : s + 4096], X[s : s + 4096])
            t_index = time.perf_counter() - t
            t = time.perf_counter()
            hits = c.query(Q, k=10)
            t_search = time.perf_counter() - t
            t1 = time.perf_counter()
            for q in Q[:100]:
                c.query(q, k=10)
            t_single = (time.perf_counter() - t1) / 100
        top1 = np.mean([h[0].id == ids[i] for i, h in enumerate(hits)])
        rows.append(
            [
                store,
                f"{n / t_index:,.0f}",
                f"{nq / t_search:,.0f}",
                f"{t_single * 1e3:.1f}",
                f"{top1:.3f}",
            ]
        )
    table(
        f"Index + search: {n:,} x {d} vectors (keyed Gaussian epsilon=50), {nq:,} queries, k=10",
        [
            "store",
            "index vectors/s (protect+upsert)",
            "search queries/s (batch)",
            "ms per single query",
            "top-1 = own record",
        ],
        rows,
    )


# ---- part 3: ranking ------------------------------------------------------------------------
def part_ranking(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(5)
    rows = []
    for d in (64, 384):
        C = rng.standard_normal((40, d))
        X = (C[rng.integers(0, 40, 2000)] + 0.8 * rng.standard_normal((2000, d))).astype(np.float32)
        Q = (C[rng.integers(0, 40, 200)] + 0.8 * rng.standard_normal((200, d))).astype(np.float32)
        Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
        Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        true = np.argsort(-(Qn @ Xn.T), axis=1)[:, :10]
        ids = [f"r{i}" for i in range(2000)]

        def recall(S: np.ndarray, true: np.ndarray = true) -> float:
            got = np.argsort(-S, axis=1)[:, :10]
            return float(
                np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, true, strict=True)])
            )

        cases = [
            ("gaussian, eps=100, renormalize=False", "gaussian", {"epsilon": 100.0, "delta": 1e-5}),
            ("laplace, eps=200, renormalize=False", "laplace", {"epsilon": 200.0}),
            ("laplace, eps=1000, renormalize=False", "laplace", {"epsilon": 1000.0}),
            (
                "projection k=48, eps=1000",
                "projection",
                {"k": 48, "epsilon": 1000.0, "delta": 1e-5},
            ),
            (
                "projection k=128, eps=1000",
                "projection",
                {"k": 128, "epsilon": 1000.0, "delta": 1e-5},
            ),
        ]
        for label, name, kw in cases:
            extra = {} if name == "projection" else {"renormalize": False}
            m = get_mechanism(name, **kw, **extra)
            Y = protect(X, m, ids=ids, key=KEY)
            Qt = m.project(Q) if name == "projection" else Qn
            S = np.asarray(Qt @ Y.T)
            norms = np.linalg.norm(Y, axis=1)
            rows.append([str(d), label, f"{recall(S):.3f}", f"{recall(S / norms):.3f}"])
    table(
        "Ranking with a clean query: recall@10 against the clean top-10 (2,000 records, "
        "40 clusters, 200 queries)",
        ["d", "mechanism", "inner product", "cosine"],
        rows,
    )


def _peak_rss_of(code: str) -> tuple[float, str]:
    """Peak RSS (MiB) and stdout of ``python -c code``, started from a small launcher (a child
    forked from this process would inherit its high-water mark into ru_maxrss)."""
    launcher = (
        "import resource, subprocess, sys; subprocess.check_call(sys.argv[2:]); "
        "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))"
    )
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as res:
        out = subprocess.run(
            [sys.executable, "-c", launcher, res.name, sys.executable, "-c", code],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return int(res.read() or 0) / 1024, out.strip()


def _write_faiss_layout1(src: Path, dst: Path) -> None:
    """The FAISS store at ``src`` rewritten as privembed wrote it before layout 2."""
    import base64
    import json

    from privembed.integrations.stores import PAYLOAD_KEY, FaissStore

    dst.mkdir(parents=True, exist_ok=True)
    with FaissStore(src, "bench", create=False) as s:
        blobs = s.payloads(s._ids)
        metas = []
        for m, b in zip(s._meta, blobs, strict=True):
            d = json.loads(m)
            if b is not None:
                d[PAYLOAD_KEY] = base64.b64encode(b).decode("ascii")
            metas.append(json.dumps(d))
        with open(dst / "bench.faiss.npz", "wb") as fh:
            np.savez(
                fh,
                index=s._faiss.serialize_index(s._index),
                ids=np.asarray(s._ids, dtype=str),
                metadata=np.asarray(metas, dtype=str),
                info=np.array(json.dumps(s._info, sort_keys=True)),
            )


def part_storage(args: argparse.Namespace, work: Path) -> None:
    import _synthetic

    from privembed.integrations.collection import ProtectedCollection

    n, mech = args.n_store, get_mechanism("laplace", epsilon=200.0)
    X = _synthetic.corpus(n, args.d)
    rows = []
    for store in args.stores:
        cells = [store]
        for payloads in (False, True):
            path = work / f"storage-{store}-{payloads}"
            t = time.perf_counter()
            with ProtectedCollection.open(store, path, "bench", mechanism=mech, key=KEY,
                                          payloads=payloads) as col:  # fmt: skip
                for s in range(0, n, 8192):
                    col.add([f"r{i}" for i in range(s, min(n, s + 8192))], X[s : s + 8192])
            took = time.perf_counter() - t
            size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            rss, count = _peak_rss_of(
                "from privembed.integrations.stores import open_store; "
                f"s = open_store({store!r}, {str(path)!r}, 'bench', create=False); "
                "print(s.count()); s.close()"
            )
            assert count == str(n), count
            cells += [f"{size / n:,.0f}", f"{size / X.nbytes:.2f}", f"{rss:.0f}", f"{took:.0f}"]
            if store == "faiss" and payloads:
                old = work / "storage-faiss-layout1"
                _write_faiss_layout1(path, old)
                osize = (old / "bench.faiss.npz").stat().st_size
                orss, _ = _peak_rss_of(
                    "from privembed.integrations.stores import FaissStore; "
                    f"print(FaissStore({str(old)!r}, 'bench', create=False).count())"
                )
                layout1 = ["faiss, layout 1 (before)", "", "", "", "", f"{osize / n:,.0f}",
                           f"{osize / X.nbytes:.2f}", f"{orss:.0f}", ""]  # fmt: skip
        rows.append(cells)
        if store == "faiss":
            rows.append(layout1)
    table(
        f"Storage per record: {n:,} x {args.d} float32 vectors ({args.d * 4:,} bytes each), "
        "keyed Laplace, payloads of 1,585 bytes",
        [
            "store",
            "bytes/record",
            "x vectors",
            "open RSS MiB",
            "index s",
            "bytes/record with payloads",
            "x vectors",
            "open RSS MiB",
            "index s",
        ],
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--part", choices=("shards", "chroma", "ranking", "storage", "all"), default="all"
    )
    ap.add_argument("--n", type=int, default=100_000, help="rows for the shards part (1000000)")
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--batch-rows", type=int, default=4096)
    ap.add_argument("--n-index", type=int, default=20_000, help="vectors for the chroma part")
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--n-store", type=int, default=10_000, help="records for storage (117659)")
    ap.add_argument("--stores", nargs="+", default=["chroma", "qdrant", "faiss"])
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp)")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="privembed-bench-", dir=args.workdir))
    try:
        if args.part in ("shards", "all"):
            part_shards(args, work)
        if args.part in ("chroma", "all"):
            part_chroma(args, work)
        if args.part in ("ranking", "all"):
            part_ranking(args)
        if args.part in ("storage", "all"):
            part_storage(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
