"""The cost law (issue 38.1): what a private query costs as the corpus grows, per mode and epsilon.

For corpus sizes N (nested random subsets of real passages, the whole real corpus, and the real
corpus topped up to 1M with vectors drawn to its spectrum), epsilon in a grid, and the modes

- ``rerank``: Laplace noise on the full 384 dimensions, candidates re-ranked by their payloads;
- ``subspace+rerank``: Laplace noise in the k-dimensional subspace of a public basis (exact PCA of
  public embeddings), re-ranked by the payloads;
- ``sealed``: no vector in the store, every payload fetched (once per client session),

it prints per (N, mode, epsilon): the k' that the recall planner (``search --recall 0.9``:
:class:`~privembed.search.rerank.RerankPlanner` on a score profile of real sample queries)
chooses for recall 0.9 of the clean top 10, the recall those k' reach on held-out real queries
(measured: the rank of every clean top-10 document among the protected scores of all N), the
k' that recall 0.9 actually needed (``k'_0.9``), and the bytes and estimated milliseconds per
query of the advice's cost model (:mod:`privembed.evaluation.cost`). Then it fits k' ~ a N^b
per (mode, epsilon) on the fit sizes (``--fit-sizes``, the subsets without WordNet) and prints
the law, and, for the cells named in ``--search``, indexes the collection for real (FAISS,
sealed payloads, a fixed key), and times one query at a time at the planner's k' (p50/p95) with
the recall the real search reached.

``--predict n:N`` runs ``advise --production-size N`` on an n-record subset (modes subspace,
Laplace at ``--predict-eps``) and compares its predicted k' and bytes with k' measured at N.

Data: ``benchmarks/corpus_passages.py`` writes the passages; they are embedded in chunks
(``privembed embed chunks/<c>.jsonl -o vec/<c>.npy --backend onnx-int8``) and this script loads
whatever chunks are embedded (see ``load``). Run::

    python benchmarks/bench_law.py --data /work/data/passages --sizes 10000,30000,100000,300000,real,1000000

Results: docs/retrieval.md ("What a query costs as the corpus grows") and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _synthetic import spectral

from privembed.evaluation.cost import Rates, query_cost, sealed_cost
from privembed.mechanisms import build_mechanism
from privembed.mechanisms.subspace import SubspaceBasis, SubspaceMechanism
from privembed.search.rerank import RerankPlanner, ScoreProfile

TOP = 10
BLOCK = 65536


# ---- data ---------------------------------------------------------------------------------
def load(folder: Path) -> dict[str, np.ndarray]:
    """``X`` (unit float32 (n, d)), ``source`` and passage ``pid`` per row (-1: reused rows),
    ``Q`` (query vectors), ``qsource``, ``relevant`` (the passage id each query belongs to) and
    ``public`` (the public basis' embeddings).

    Rows: every embedded chunk ``vec/<c>.npy`` of ``chunks/<c>.jsonl`` (``p*``: GCIDE and
    WordNet, ``r*``: man-page fifths), in id order, then ``reuse/corpus.npz`` (120,000 public
    dictionary sentences, GCIDE and FOLDOC, from ``.gpu/corpus.txt.xz``, source
    ``dict-sentences``). ``reuse/public.npz`` (20,000 other sentences of that file) is the
    public basis, not part of the corpus. Queries: ``vec/q.npy`` of ``chunks/q.jsonl``.
    """
    parts, srcs, ids = [], [], []
    for vec in sorted((folder / "vec").glob("*.npy")):
        if vec.name.endswith(".tmp.npy") or vec.stem == "q":
            continue
        rows = [json.loads(x) for x in (folder / "chunks" / f"{vec.stem}.jsonl").open()]
        V = np.load(vec)
        assert V.shape[0] == len(rows), vec
        parts.append(V)
        srcs += [r["source"] for r in rows]
        ids += [r["id"] for r in rows]
    order = np.argsort(np.asarray(ids), kind="stable")
    X = np.concatenate(parts)[order] if parts else np.empty((0, 384), np.float32)
    S = np.asarray(srcs)[order]
    reuse = folder / "reuse"
    if (reuse / "corpus.npz").exists():
        R = np.load(reuse / "corpus.npz")["embeddings"]
        X = np.concatenate([X, R])
        S = np.concatenate([S, np.full(R.shape[0], "dict-sentences")])
    P = np.concatenate([np.asarray(ids, dtype=np.int64)[order], np.full(X.shape[0] - len(ids), -1)])
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    qrows = [json.loads(x) for x in (folder / "chunks" / "q.jsonl").open()]
    Q = np.load(folder / "vec" / "q.npy")
    Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    public = np.load(reuse / "public.npz")["embeddings"]
    return {
        "X": X.astype(np.float32), "source": S, "pid": P, "Q": Q.astype(np.float32),
        "qsource": np.asarray([r["source"] for r in qrows]),
        "relevant": np.asarray([r["relevant"] for r in qrows], dtype=np.int64), "public": public,
    }  # fmt: skip


# ---- measurement --------------------------------------------------------------------------
def clean_top(Q: np.ndarray, D: np.ndarray, k: int = TOP) -> np.ndarray:
    """Each query's clean top ``k`` rows of D (blocks of documents, merged)."""
    best_s = np.full((Q.shape[0], k), -np.inf, dtype=np.float32)
    best_i = np.zeros((Q.shape[0], k), dtype=np.int64)
    for s in range(0, D.shape[0], BLOCK):
        S = Q @ D[s : s + BLOCK].T
        kk = min(k, S.shape[1])
        part = np.argpartition(-S, kk - 1, axis=1)[:, :kk]
        cs = np.concatenate([best_s, np.take_along_axis(S, part, axis=1)], axis=1)
        ci = np.concatenate([best_i, part + s], axis=1)
        keep = np.argsort(-cs, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cs, keep, axis=1), np.take_along_axis(ci, keep, axis=1)
    return best_i


def _unit(A: np.ndarray) -> np.ndarray:
    A = np.asarray(A, dtype=np.float32)
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-12)


def protected(mech, D: np.ndarray, seed: int) -> np.ndarray:
    """The store's vectors: ``mech`` applied to D in blocks (block j drawn with seed + j)."""
    out = None
    for j, s in enumerate(range(0, D.shape[0], BLOCK)):
        Y = _unit(mech.privatize(D[s : s + BLOCK], rng=seed + j))
        if out is None:
            out = np.empty((D.shape[0], Y.shape[1]), dtype=np.float32)
        out[s : s + Y.shape[0]] = Y
    assert out is not None
    return out


def ranks(Qp: np.ndarray, Y: np.ndarray, top: np.ndarray) -> np.ndarray:
    """1-based rank among the protected scores of each clean top-10 row (ties against)."""
    own = np.einsum("qd,qkd->qk", Qp, Y[top])
    R = np.zeros(top.shape, dtype=np.int64)
    for s in range(0, Y.shape[0], BLOCK):
        P = Qp @ Y[s : s + BLOCK].T
        for c in range(0, Qp.shape[0], 50):
            R[c : c + 50] += (P[c : c + 50, None, :] >= own[c : c + 50, :, None]).sum(axis=2)
    return R


def needed(R: np.ndarray, recall: float = 0.9) -> int:
    """Smallest k' whose mean recall of the clean top 10 is >= ``recall``."""
    flat = np.sort(R.ravel())
    return int(flat[math.ceil(recall * flat.size) - 1])


def ndcg_share(R: np.ndarray, rel_pos: np.ndarray, depth: int) -> tuple[float, float, int]:
    """(clean NDCG@10, private NDCG@10 after re-ranking k' = ``depth`` candidates, queries whose
    relevant passage is in their clean top 10) with one relevant passage per query.

    ``rel_pos`` is the relevant passage's position in each query's clean top 10 (0-based, by
    clean score; -1 when it is not there). After the exact re-rank of the candidates, the
    relevant passage stands 1 + (clean top-10 passages above it that were fetched) from the top
    when it was fetched itself. A relevant passage outside the clean top 10 counts 0 on both
    sides (the private side could only do better there: a lower bound)."""
    ok = rel_pos >= 0
    c = np.where(ok, rel_pos, 0)
    clean = np.where(ok, 1.0 / np.log2(2.0 + c), 0.0)
    fetched = R <= depth
    above = np.array([fetched[i, : c[i]].sum() for i in range(R.shape[0])])
    got = ok & fetched[np.arange(R.shape[0]), c]
    priv = np.where(got, 1.0 / np.log2(2.0 + above), 0.0)
    return float(clean.mean()), float(priv.mean()), int(ok.sum())


def mechanism(mode: str, eps: float, basis: SubspaceBasis):
    if mode == "subspace+rerank":
        return SubspaceMechanism(basis=basis, epsilon=eps, noise="laplace")
    return build_mechanism("laplace", epsilon=eps)


def planner_depth(mode: str, mech, Qprof: np.ndarray, D: np.ndarray) -> int:
    """k' of ``search --recall 0.9``: the collection's planner on a profile of sample queries."""
    top_k = min(100, D.shape[0] - 1)
    if mode == "subspace+rerank":
        prof = ScoreProfile.from_subspace(Qprof, D, mech, top_k=top_k, rng=0)
    else:
        prof = ScoreProfile.from_embeddings(Qprof, D, top_k=top_k, rng=0)
    return RerankPlanner(prof, documents=mech, rng=0).depth(k=TOP, recall=0.9)


def real_search(mech, D: np.ndarray, Q: np.ndarray, top: np.ndarray, depth: int):
    """Index D for real (FAISS, sealed payloads, a fixed key) and time one query at a time at
    k' = ``depth``: (p50 ms, p95 ms, recall of the clean top 10, index seconds, the ids each
    query returned in order)."""
    from privembed.integrations.collection import ProtectedCollection

    key = bytes(range(32))
    with tempfile.TemporaryDirectory(dir=os.environ.get("LAW_TMP")) as tmp:
        t0 = time.perf_counter()
        with ProtectedCollection.open(
            "faiss", os.path.join(tmp, "db"), "law", mechanism=mech, key=key, payloads=True
        ) as col:
            for s in range(0, D.shape[0], BLOCK):
                col.add([str(i) for i in range(s, min(s + BLOCK, D.shape[0]))], D[s : s + BLOCK])
            t_index = time.perf_counter() - t0
            col.query(Q[:1], k=TOP, rerank=depth)  # warm: the payload file's first open
            times, hits = [], []
            for q in Q:
                t = time.perf_counter()
                h = col.query(q[None, :], k=TOP, rerank=depth)
                times.append(1e3 * (time.perf_counter() - t))
                hits.append([x.id for x in h[0]])
    got = np.mean([len({str(j) for j in t} & set(h)) / TOP for t, h in zip(top, hits, strict=True)])
    p50, p95 = np.percentile(times, [50, 95])
    return float(p50), float(p95), float(got), t_index, hits


# ---- the run --------------------------------------------------------------------------------
def _sizes(spec: str, n_fit: int, n_real: int) -> list[tuple[str, int]]:
    out = []
    for tok in spec.split(","):
        if tok == "real":
            out.append(("real", n_real))
        else:
            n = int(tok)
            out.append(("fit" if n <= n_fit else ("real" if n <= n_real else "synthetic"), n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sizes", default="10000,30000,100000,300000,real,1000000")
    ap.add_argument("--eps", default="50,100,150")
    ap.add_argument("--modes", default="rerank,subspace+rerank,sealed")
    ap.add_argument("--queries", type=int, default=200, help="held-out evaluation queries")
    ap.add_argument(
        "--relevant-only",
        action="store_true",
        help="evaluate on queries whose relevant passage is in the corpus (NDCG share)",
    )
    ap.add_argument("--max-mb", type=float, default=4.0, help="the per-query budget (MB)")
    ap.add_argument(
        "--synthetic-cells",
        default="",
        help="mode:eps,... measured at the sizes topped up with synthetic rows (default: all)",
    )
    ap.add_argument(
        "--cells", default="", help="mode:eps,... measured at every size (default: all)"
    )
    ap.add_argument("--search", default="", help="cells searched for real: N|kind:mode:eps,...")
    ap.add_argument("--search-queries", type=int, default=100)
    ap.add_argument("--predict", default="", help="n:N,... (advise --production-size N on n)")
    ap.add_argument("--predict-eps", type=float, default=100.0)
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args()

    t_start = time.perf_counter()
    data = load(args.data)
    X, src = data["X"], data["source"]
    basis = SubspaceBasis.from_embeddings(data["public"])
    # queries: GCIDE quotations and man-page NAME lines (WordNet's examples are not used: the
    # project's held-out corpus is WordNet), half for evaluation, half for the planner's
    # profile -- never the same query in both
    pool = np.flatnonzero(data["qsource"] != "wordnet")
    pick = np.random.default_rng(0).permutation(pool)
    if args.relevant_only:  # evaluation queries whose relevant passage is in the corpus
        there = np.isin(data["relevant"][pick], data["pid"])
        ev = pick[there][: args.queries]
        pr = pick[~np.isin(pick, ev)][: args.queries]
    else:
        ev, pr = pick[: args.queries], pick[args.queries : 2 * args.queries]
    Qeval, Qprof = data["Q"][ev], data["Q"][pr]
    rel_pid = data["relevant"][ev]
    fit_rows = np.flatnonzero(src != "wordnet")
    perm = np.random.default_rng(0).permutation(fit_rows)
    n_real = X.shape[0]
    sizes = _sizes(args.sizes, fit_rows.size, n_real)
    eps_grid = [float(e) for e in args.eps.split(",")]
    modes = args.modes.split(",")
    rates = Rates.measure(384)
    counts = {str(s): int((src == s).sum()) for s in np.unique(src)}
    print(f"# real corpus: {n_real:,} rows {counts}; fit pool (no WordNet) {fit_rows.size:,}")
    print(f"# queries: {len(Qeval)} evaluation, {len(Qprof)} profile; {rates.source}: "
          f"open {rates.open_ms:.4f} ms/payload, scan {rates.scan_ms_per_mdim:.2f} ms/Mdim")  # fmt: skip
    print(f"# numpy {np.__version__}, faiss {version('faiss-cpu')}, Python "
          f"{platform.python_version()}, load {os.getloadavg()}")  # fmt: skip
    searches = {tuple(c.split(":")) for c in args.search.split(",") if c}
    synth_cells = {tuple(c.split(":")) for c in args.synthetic_cells.split(",") if c}
    cells = {tuple(c.split(":")) for c in args.cells.split(",") if c}
    rows: list[dict] = []
    print("| N | kind | mode | eps | k | k' planner (recall 0.9) | recall at it | MB/query | "
          "k'_0.9 measured | k' in 4 MB | recall / NDCG share at it | real search at k' | "
          "p50 / p95 ms | recall / NDCG share (real) |")  # fmt: skip
    print("|" + "---|" * 14)
    for kind, n in sizes:
        t0 = time.perf_counter()
        if kind == "fit":
            sel = np.sort(perm[:n])
        else:
            sel = np.arange(n_real) if n >= n_real else np.sort(
                np.random.default_rng(1).permutation(n_real)[:n])  # fmt: skip
        D = X[sel]
        if kind == "synthetic":
            D = np.concatenate([D, spectral(X, n - n_real, seed=3)])
        top = clean_top(Qeval, D)
        pid_sel = data["pid"][sel]  # the passage id of each row of D (-1: reused rows)
        where = np.full(int(max(pid_sel.max(), rel_pid.max())) + 2, -1)
        where[pid_sel[pid_sel >= 0]] = np.flatnonzero(pid_sel >= 0)
        rel_row = where[rel_pid]  # each query's relevant passage's row in D, or -1
        rel_pos = np.array([int(np.flatnonzero(t == r)[0]) if r >= 0 and (t == r).any() else -1
                            for t, r in zip(top, rel_row, strict=True)])  # fmt: skip
        for mode in modes:
            if mode == "sealed":
                c = sealed_cost(n=n, d=384, rates=rates)
                c_nc = sealed_cost(n=n, d=384, rates=rates, client_cache=False)
                rows.append(dict(N=n, kind=kind, mode=mode, eps=None, depth=n, recall=1.0,
                                 sync_MB=c.sync_bytes / 1e6, MB=c_nc.bytes / 1e6, ms=c.ms))  # fmt: skip
                print(f"| {n:,} | {kind} | sealed | - | - | all {n:,} | 1.000 | "
                      f"{c.sync_bytes / 1e6:,.0f} once a session ({c_nc.bytes / 1e6:,.0f} a query "
                      f"uncached) | | | | | ~{c.ms:.0f} (local scan) | |", flush=True)  # fmt: skip
                continue
            for eps in eps_grid:
                if kind == "synthetic" and synth_cells and (mode, f"{eps:g}") not in synth_cells:
                    continue
                if cells and (mode, f"{eps:g}") not in cells:
                    continue
                mech = mechanism(mode, eps, basis)
                dim = int(getattr(mech, "k", 384))
                Y = protected(mech, D, seed=1000 + int(eps))
                Qp = _unit(mech.public_transform(Qeval)) if mode == "subspace+rerank" else Qeval
                R = ranks(Qp, Y, top)
                del Y
                kp = planner_depth(mode, mech, Qprof, D)
                per = query_cost(mode, n=n, d=384, store_dim=dim, depth=1, rates=rates).bytes
                per -= 4 * dim  # bytes per candidate
                kb = int((args.max_mb * 1e6 - 4 * dim) // per)
                cost = query_cost(mode, n=n, d=384, store_dim=dim, depth=max(1, kp), rates=rates)
                c0, pb, n_ok = ndcg_share(R, rel_pos, kb)
                share = pb / c0 if c0 > 0 else float("nan")
                row = dict(N=n, kind=kind, mode=mode, eps=eps, k=dim, depth=kp,
                           recall=float((R <= kp).mean()), MB=cost.bytes / 1e6, ms=cost.ms,
                           k90=needed(R), budget_depth=kb, recall_budget=float((R <= kb).mean()),
                           ndcg_clean=c0, ndcg_budget=pb, ndcg_share_budget=share,
                           ndcg_queries=n_ok)  # fmt: skip
                lat = " | |"
                if {(str(n), mode, f"{eps:g}"), (kind, mode, f"{eps:g}")} & searches:
                    ks = min(kp, kb)
                    nq = args.search_queries
                    p50, p95, got, t_ix, hits = real_search(mech, D, Qeval[:nq], top[:nq], ks)
                    pos = [int(np.flatnonzero(np.asarray(h) == str(r))[0]) if str(r) in h else -1
                           for h, r in zip(hits, rel_row[:nq], strict=True)]  # fmt: skip
                    ok = rel_pos[:nq] >= 0
                    c_real = np.where(ok, 1 / np.log2(2.0 + np.maximum(rel_pos[:nq], 0)), 0).mean()
                    p_real = np.where(ok & (np.asarray(pos) >= 0),
                                      1 / np.log2(2.0 + np.maximum(pos, 0)), 0).mean()  # fmt: skip
                    sh = p_real / c_real if c_real > 0 else float("nan")
                    row.update(search_depth=ks, p50=p50, p95=p95, recall_real=got, index_s=t_ix,
                               ndcg_share_real=sh)  # fmt: skip
                    lat = f"{ks:,} | {p50:.0f} / {p95:.0f} | {got:.3f} / {sh:.2f} (index {t_ix:.0f} s)"
                else:
                    lat = " | | "
                rows.append(row)
                print(f"| {n:,} | {kind} | {mode} | {eps:g} | {dim} | {kp:,} | "
                      f"{row['recall']:.3f} | {cost.bytes / 1e6:.2f} | {row['k90']:,} | {kb:,} | "
                      f"{row['recall_budget']:.3f} / {share:.2f} ({n_ok} q) | {lat} |", flush=True)  # fmt: skip
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        print(f"#   N = {n:,} took {time.perf_counter() - t0:.0f} s, peak RSS so far {peak:.1f} GB, "
              f"load {os.getloadavg()}",
              flush=True)  # fmt: skip
        del D

    # the law: k' ~ a N^b on the fit sizes (and the real/synthetic points against it)
    print(
        "\n| mode | eps | k' (planner) ~ | k'_0.9 (measured) ~ | law at the largest N / planner there |"
    )
    print("|---|---|---|---|---|")
    for mode in [m for m in modes if m != "sealed"]:
        for eps in eps_grid:
            cell = [r for r in rows if r.get("mode") == mode and r.get("eps") == eps]
            fit = [r for r in cell if r["kind"] == "fit"]
            if len(fit) < 2:
                continue
            ln = np.log([r["N"] for r in fit])
            b, la = np.polyfit(ln, np.log([r["depth"] for r in fit]), 1)
            b9, la9 = np.polyfit(ln, np.log([max(1, r["k90"]) for r in fit]), 1)
            far = max(cell, key=lambda r: r["N"])
            pred = math.exp(la) * far["N"] ** b
            print(f"| {mode} | {eps:g} | {math.exp(la):.3g} N^{b:.2f} | {math.exp(la9):.3g} "
                  f"N^{b9:.2f} | {pred:,.0f} / {far['depth']:,} at {far['N']:,} ({far['kind']}) |")  # fmt: skip
            for r in cell:
                r["law_b"], r["law_a"] = float(b), float(math.exp(la))

    for spec in [s for s in args.predict.split(",") if s]:
        small, big = (int(x) for x in spec.split(":"))
        predict_check(X, perm, fit_rows, Qeval, basis, small, big, args.predict_eps, rates, rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=float) + "\n")
    print(f"# total {time.perf_counter() - t_start:.0f} s, load {os.getloadavg()}")


def predict_check(X, perm, fit_rows, Qeval, basis, small, big, eps, rates, rows) -> None:
    """advise --production-size ``big`` on ``small`` records (subspace, Laplace ``eps``), and
    k' measured the way advise measures it on ``big`` records (held out: the rows beyond the
    first ``small`` of the permutation)."""
    from privembed.evaluation import modes as M

    pool = perm if big <= fit_rows.size else np.random.default_rng(1).permutation(X.shape[0])
    Ds = X[np.sort(pool[:small])]
    t0 = time.perf_counter()
    adv = M.advise_modes(
        Ds, queries=Qeval, modes=("subspace+rerank",), mechanisms=("laplace",), basis=basis,
        grid=(eps,), max_bytes_per_query=None, production_size=big, rates=rates, seed=0,
        linkage_records=200,
    )  # fmt: skip
    p = adv.prediction
    if p is None:
        print(f"# predict {small:,} -> {big:,}: no prediction ({adv.lines()[:3]})")
        return
    full = M._Clean(M._unit(X[np.sort(pool[:big])]), M._unit(Qeval))
    runner = M._ModeRunner("subspace+rerank", "laplace", {}, full, floor=0.9, metric="recall",
                           max_depth=big // 4, seed=0, basis=basis, draws=3)  # fmt: skip
    got = runner.probe(p.epsilon)
    measured = None if got is None or not got.ok else got.depth
    cost = None if measured is None else query_cost(
        "subspace+rerank", n=big, d=384, store_dim=int(getattr(got.mech, "k", 384)),
        depth=measured, rates=rates,
    ).bytes  # fmt: skip
    ok = measured is not None and p.low <= measured <= p.high
    print(f"# predict {small:,} -> {big:,} (subspace / laplace eps {eps:g}): {p.text()} "
          f"Measured at {big:,}: k' {measured}, {None if cost is None else cost / 1e6:.4} MB; "
          f"within the stated range: {ok} ({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    rows.append(dict(predict_from=small, predict_to=big, eps=eps, predicted=p.depth, low=p.low,
                     high=p.high, predicted_MB=p.bytes_per_query / 1e6, measured=measured,
                     measured_MB=None if cost is None else cost / 1e6, within=ok))  # fmt: skip


if __name__ == "__main__":
    main()
