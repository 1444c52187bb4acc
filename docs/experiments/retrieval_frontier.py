"""Private retrieval frontier on the GCIDE task: plain search vs over-fetch + exact re-rank.

For each mechanism (Laplace, Gaussian, Purkayastha) over a fixed epsilon grid and each side
(protected documents + clean queries; protected queries + clean documents, the RemoteRAG
pattern; both protected), on the GCIDE *test* queries:

* NDCG@10 of plain search (top 10 by protected similarity);
* NDCG@10 after fetching the top k' by protected similarity and re-ranking them with the exact
  vectors and the clean query (exact vectors in NumPy stand in for decrypted payloads), for
  k' = 100, 1,000 and the theory k' for a recall of 0.95 of the true top 10
  (:func:`privembed.search.rerank.rerank_depth`, profile built from *dev* queries only);
* recall of the true top 10 (by clean cosine) within the top k', measured and predicted.

Nothing is tuned on test: the epsilon grid is fixed here, k' comes from the dev profile. The
corpus is a documented subset (see ``gcide_embed.subset``) unless ``--n-docs 0``.

Run (after ``gcide_embed.py``)::

    nice -n 10 python docs/experiments/retrieval_frontier.py [--n-docs 40000]

Writes ``retrieval_frontier.csv`` (one row per mechanism x epsilon x side),
``retrieval_frontier_summary.csv`` (smallest epsilon keeping 90% of clean NDCG@10),
``retrieval_latency.csv`` and ``docs/figures/retrieval_frontier.png``.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent / "figures"
sys.path.insert(0, str(HERE))

from gcide_embed import DEFAULT_CACHE, load_embedded  # noqa: E402

from privembed import get_mechanism  # noqa: E402
from privembed.search.rerank import (  # noqa: E402
    RerankPlanner,
    ScoreProfile,
    protected_ranks,
    recall_at_depths,
)

GRIDS = {
    "laplace": [50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0],
    "gaussian": [
        25.0,
        37.5,
        50.0,
        75.0,
        100.0,
        150.0,
        250.0,
        500.0,
        1000.0,
        2000.0,
        4000.0,
        8000.0,
    ],
    "purkayastha": [50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0],
}
SIDES = ("documents", "queries", "both")
DEPTHS = (100, 1000)
K = 10
TARGET = 0.95


def mechanism(name: str, eps: float):
    if name == "gaussian":
        return get_mechanism(name, epsilon=eps, delta=1e-5)
    return get_mechanism(name, epsilon=eps)


def unit(A):
    A = np.asarray(A, dtype=np.float32)
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def relevance_matrix(query_ids, qrels, doc_index):
    """Per query: the set of relevant row indices."""
    return [
        {doc_index[d] for d, r in qrels[q].items() if r > 0 and d in doc_index} for q in query_ids
    ]


def ndcg10(ranked, relevant) -> float:
    """Mean NDCG@10 with binary relevance (the task's judgments are binary)."""
    disc = 1.0 / np.log2(np.arange(2, K + 2))
    vals = []
    for row, rel in zip(ranked, relevant, strict=True):
        if not rel:
            continue
        gains = np.array([1.0 if int(j) in rel else 0.0 for j in row[:K]])
        vals.append(float(gains @ disc[: gains.size]) / float(disc[: min(len(rel), K)].sum()))
    return float(np.mean(vals))


def topk_desc(S, k):
    k = min(k, S.shape[1])
    idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(S, idx, axis=1), axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1)


def evaluate(C, P, relevant, depths):
    """Plain NDCG@10, re-ranked NDCG@10 per depth and the ranks of the true top 10."""
    kmax = max(depths)
    out = {"plain": [], **{d: [] for d in depths}}
    ranks = []
    for s in range(0, C.shape[0], 128):
        Cb, Pb = C[s : s + 128], P[s : s + 128]
        cand = topk_desc(Pb, kmax)
        out["plain"].append(cand[:, :K])
        exact = np.take_along_axis(Cb, cand, axis=1)
        for d in depths:
            sub = exact[:, :d]
            best = np.argsort(-sub, axis=1, kind="stable")[:, :K]
            out[d].append(np.take_along_axis(cand[:, :d], best, axis=1))
        ranks.append(protected_ranks(Cb, Pb, k=K))
    res = {key: ndcg10(np.concatenate(v), relevant) for key, v in out.items()}
    return res, np.concatenate(ranks)


def latency(D, Qt, C, n_queries=100, seed=0):
    """Per-query cost of the trusted side: open k' payloads and re-rank them exactly."""
    from privembed.keys.payload import PayloadCodec, payload_size

    codec = PayloadCodec(bytes(range(32)))
    ids = [f"d{i}" for i in range(D.shape[0])]
    rng = np.random.default_rng(seed)
    rows = []
    for kp in DEPTHS:
        blobs = {}
        times = []
        for qi in rng.choice(Qt.shape[0], n_queries, replace=False):
            cand = topk_desc(C[qi : qi + 1], kp)[0]  # any candidate set of size k'
            for j in cand:
                if j not in blobs:
                    blobs[j] = codec.seal(D[j], record_id=ids[j], collection="gcide")
            t0 = time.perf_counter()
            V = codec.vectors(
                [blobs[j] for j in cand], ids=[ids[j] for j in cand], collection="gcide"
            )
            top = cand[np.argsort(-(V @ Qt[qi]))[:K]]
            times.append(time.perf_counter() - t0)
            assert top.size == K
        rows.append(
            {
                "k_prime": kp,
                "median_ms_open_and_rerank": round(1000 * float(np.median(times)), 2),
                "p90_ms": round(1000 * float(np.quantile(times, 0.9)), 2),
                "payload_bytes_float32": payload_size(D.shape[1]),
                "payload_bytes_float16": payload_size(D.shape[1], dtype="float16"),
                "fetched_kb_per_query_float32": round(kp * payload_size(D.shape[1]) / 1024, 1),
                "fetched_kb_per_query_float16": round(
                    kp * payload_size(D.shape[1], dtype="float16") / 1024, 1
                ),
            }
        )
    # the untrusted side: exact search over the protected vectors (FAISS flat inner product)
    import faiss

    faiss.omp_set_num_threads(1)
    index = faiss.IndexFlatIP(D.shape[1])
    index.add(np.ascontiguousarray(D))
    times = []
    for qi in rng.choice(Qt.shape[0], n_queries, replace=False):
        t0 = time.perf_counter()
        index.search(Qt[qi : qi + 1], 1000)
        times.append(time.perf_counter() - t0)
    for r in rows:
        r["median_ms_flat_search_1000"] = round(1000 * float(np.median(times)), 2)
        r["n_docs"] = D.shape[0]
    return rows


def smallest_eps(rows, clean):
    """Smallest grid epsilon (and its log-interpolated value) keeping 90% of clean NDCG@10."""
    out = []
    keyed = {}
    for r in rows:
        keyed.setdefault((r["mechanism"], r["side"]), []).append(r)
    for (mech, side), rs in keyed.items():
        rs = sorted(rs, key=lambda r: r["epsilon"])
        entry = {"mechanism": mech, "side": side}
        for col in ("ndcg_plain", "ndcg_rerank_100", "ndcg_rerank_1000", "ndcg_rerank_theory"):
            eps = [r["epsilon"] for r in rs]
            val = [r[col] for r in rs]
            # smallest grid point from which every larger epsilon also passes
            first = None
            for i in range(len(val)):
                if all(v >= 0.9 * clean for v in val[i:]):
                    first = i
                    break
            if first is None:
                entry[col] = float("nan")
                entry[col + "_interp"] = float("nan")
                continue
            entry[col] = eps[first]
            if first == 0:
                entry[col + "_interp"] = eps[0]
            else:  # log-linear interpolation between the last failing and first passing point
                e0, e1, v0, v1 = eps[first - 1], eps[first], val[first - 1], val[first]
                f = (0.9 * clean - v0) / (v1 - v0) if v1 != v0 else 1.0
                entry[col + "_interp"] = round(
                    math.exp(math.log(e0) + f * (math.log(e1) - math.log(e0))), 1
                )
        plain = entry["ndcg_plain_interp"]
        for col in ("ndcg_rerank_1000", "ndcg_rerank_theory"):
            entry[f"half_eps_holds_{col.split('_')[-1]}"] = bool(
                not math.isnan(plain) and entry[col + "_interp"] <= plain / 2
            )
        out.append(entry)
    return out


def write_summary(rows, clean):
    summary = smallest_eps(rows, clean)
    with (HERE / "retrieval_frontier_summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    write_markdown(rows, summary, clean)


def short_guarantee(text: str) -> str:
    """``"100-d_X l2 (200-LDP)"`` from a guarantee's description."""
    m = re.match(r"([\d.]+)-d_X privacy per unit of (\w+)", text)
    if m is None:
        return text.split(" for any")[0]
    implied = re.search(r"implies ([\d.]+)-LDP", text)
    tail = f" ({float(implied.group(1)):.4g}-LDP)" if implied else ""
    return f"{m.group(1)}-d_X {m.group(2)}{tail}"


def write_markdown(rows, summary, clean):
    """The tables of docs/retrieval.md, generated from the CSVs."""
    out = [
        f"Clean NDCG@10 {clean:.4f} ({int(rows[0]['n_queries'])} test queries, "
        f"{int(rows[0]['n_docs'])} documents); 90% of clean = {0.9 * clean:.4f}.",
        "",
    ]
    for side in SIDES:
        out += [
            f"### Protected {side}" if side != "both" else "### Both protected",
            "",
            "| mechanism | epsilon | guarantee | E[cos] | NDCG@10 plain | re-rank 100 | "
            "re-rank 1,000 | k' theory(0.95) | re-rank k' | recall@100 | recall@1,000 | "
            "recall@k' (predicted) |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(
            (r for r in rows if r["side"] == side),
            key=lambda r: (list(GRIDS).index(r["mechanism"]), r["epsilon"]),
        ):
            g = short_guarantee(r["guarantee"])
            out.append(
                f"| {r['mechanism']} | {r['epsilon']:g} | {g} | {r['expected_cosine']:.3f} | "
                f"{r['ndcg_plain']:.4f} | {r['ndcg_rerank_100']:.4f} | {r['ndcg_rerank_1000']:.4f} | "
                f"{int(r['k_theory'])} | {r['ndcg_rerank_theory']:.4f} | {r['recall_100']:.3f} | "
                f"{r['recall_1000']:.3f} | {r['recall_theory']:.3f} ({r['predicted_recall_theory']:.3f}) |"
            )
        out.append("")
    out += [
        "### Smallest epsilon keeping 90% of clean NDCG@10",
        "",
        "Grid value from which every larger grid epsilon passes; in brackets the log-linear "
        "interpolation between the last failing and the first passing grid point. "
        "'half' = re-rank needs at most half the epsilon of plain search (interpolated values).",
        "",
        "| mechanism | side | plain | re-rank 100 | re-rank 1,000 | re-rank theory k' | "
        "half (1,000) | half (theory) |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]

    def cell(e, col):
        v, iv = e[col], e[col + "_interp"]
        return "not reached" if math.isnan(v) else f"{v:g} ({iv:g})"

    for e in summary:
        out.append(
            f"| {e['mechanism']} | {e['side']} | {cell(e, 'ndcg_plain')} | "
            f"{cell(e, 'ndcg_rerank_100')} | {cell(e, 'ndcg_rerank_1000')} | "
            f"{cell(e, 'ndcg_rerank_theory')} | {'yes' if e['half_eps_holds_1000'] else 'no'} | "
            f"{'yes' if e['half_eps_holds_theory'] else 'no'} |"
        )
    err = np.array([r["recall_theory"] - TARGET for r in rows])
    err_doc = np.array([r["recall_theory_docprofile"] - TARGET for r in rows])
    out += [
        "",
        f"Theory k' (target recall {TARGET}), measured recall on the test queries over all "
        f"{len(rows)} settings: profile from dev queries: mean error {err.mean():+.4f}, "
        f"largest |error| {np.abs(err).max():.4f}, {int((np.abs(err) <= 0.03).sum())}/{len(rows)} "
        f"within 0.03; profile from corpus documents as pseudo-queries: mean error "
        f"{err_doc.mean():+.4f}, largest |error| {np.abs(err_doc).max():.4f}, "
        f"{int((np.abs(err_doc) <= 0.03).sum())}/{len(rows)} within 0.03.",
        "",
    ]
    (HERE / "retrieval_frontier.md").write_text("\n".join(out))


def plot(rows, clean, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(SIDES), len(GRIDS), figsize=(13, 10), sharey=True)
    styles = {
        "ndcg_plain": ("plain search", "k", "o"),
        "ndcg_rerank_100": ("re-rank k'=100", "tab:blue", "s"),
        "ndcg_rerank_1000": ("re-rank k'=1,000", "tab:green", "^"),
        "ndcg_rerank_theory": ("re-rank k'=theory(0.95)", "tab:red", "D"),
    }
    for i, side in enumerate(SIDES):
        for j, mech in enumerate(GRIDS):
            ax = axes[i, j]
            rs = sorted(
                (r for r in rows if r["mechanism"] == mech and r["side"] == side),
                key=lambda r: r["epsilon"],
            )
            if not rs:
                continue
            x = [r["epsilon"] for r in rs]
            for col, (label, color, marker) in styles.items():
                ax.plot(x, [r[col] for r in rs], marker=marker, color=color, label=label, ms=4)
            ax.axhline(clean, color="grey", lw=0.8, ls=":")
            ax.axhline(0.9 * clean, color="grey", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(x)
            ax.set_xticklabels([f"{e:g}" for e in x], rotation=45, fontsize=8)
            ax.set_title(
                f"{mech}, protected {side}" if side != "both" else f"{mech}, both protected",
                fontsize=10,
            )
            if i == len(SIDES) - 1:
                ax.set_xlabel("epsilon" + (" (delta = 1e-5)" if mech == "gaussian" else ""))
            if j == 0:
                ax.set_ylabel("NDCG@10 (GCIDE test)")
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Plain search vs over-fetch + exact re-rank (dotted: clean, dashed: 90% of clean)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--path", default=None)
    ap.add_argument("--n-docs", type=int, default=40_000)
    ap.add_argument("--test-queries", type=int, default=2000)
    ap.add_argument("--dev-queries", type=int, default=1000)
    ap.add_argument(
        "--profile-queries", type=int, default=500, help="dev queries in the k' profile"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mechanisms", nargs="+", default=list(GRIDS))
    ap.add_argument("--out", type=Path, default=HERE / "retrieval_frontier.csv")
    ap.add_argument("--plot-only", action="store_true", help="summary and figure from --out")
    args = ap.parse_args()
    if args.plot_only:
        with args.out.open() as fh:
            rows = [
                {
                    k: v if k in ("mechanism", "side", "guarantee") else float(v)
                    for k, v in r.items()
                }
                for r in csv.DictReader(fh)
            ]
        write_summary(rows, rows[0]["ndcg_clean"])
        plot(rows, rows[0]["ndcg_clean"], FIGURES / "retrieval_frontier.png")
        return

    data = load_embedded(
        n_docs=args.n_docs or None,
        test_queries=args.test_queries,
        dev_queries=args.dev_queries,
        cache=args.cache,
        path=args.path,
    )
    D = unit(data["D"])
    task, Qt = data["test"]
    Qt = unit(Qt)
    Qd = unit(data["dev"][1])
    doc_index = {d: i for i, d in enumerate(data["doc_ids"])}
    relevant = relevance_matrix(task.query_ids, task.qrels, doc_index)
    C = Qt @ D.T  # clean cosines, test queries x corpus
    clean = ndcg10(topk_desc(C, K), relevant)
    print(f"corpus {D.shape}, test queries {Qt.shape[0]}, clean NDCG@10 {clean:.4f}", flush=True)
    t0 = time.time()
    profile = ScoreProfile.from_embeddings(Qd[: args.profile_queries], D, top_k=K, rng=args.seed)
    print(
        f"profile: {profile.n_queries} dev queries, rho {profile.rho:.3f}, {time.time() - t0:.0f} s"
    )
    # the profile a store can build alone: corpus documents as pseudo-queries (own doc left out)
    pseudo = np.random.default_rng(args.seed).choice(
        D.shape[0], args.profile_queries, replace=False
    )
    profile_docs = ScoreProfile.from_embeddings(D[pseudo], D, top_k=K, rng=args.seed)

    done = set()
    rows = []
    if args.out.exists():
        with args.out.open() as fh:
            for r in csv.DictReader(fh):
                for key in r:
                    if key not in ("mechanism", "side", "guarantee"):
                        r[key] = float(r[key])
                rows.append(r)
                done.add((r["mechanism"], r["epsilon"], r["side"]))
    fields = [
        "mechanism", "epsilon", "side", "guarantee", "expected_cosine", "n_docs", "n_queries",
        "ndcg_clean", "ndcg_plain", "ndcg_rerank_100", "ndcg_rerank_1000", "ndcg_rerank_theory",
        "k_theory", "recall_100", "recall_1000", "recall_theory", "predicted_recall_100",
        "predicted_recall_1000", "predicted_recall_theory", "k_theory_docprofile",
        "recall_theory_docprofile", "seconds",
    ]  # fmt: skip
    new_file = not args.out.exists()
    with args.out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        if new_file:
            w.writeheader()
        for name in args.mechanisms:
            for eps in GRIDS[name]:
                m = mechanism(name, eps)
                Y = None
                for side in SIDES:
                    if (name, eps, side) in done:
                        continue
                    t0 = time.time()
                    if Y is None:
                        Y = unit(
                            m.privatize(D, rng=np.random.default_rng([args.seed, 1, int(eps * 10)]))
                        )
                    docs = Y if side != "queries" else D
                    Qp = (
                        unit(
                            m.privatize(
                                Qt, rng=np.random.default_rng([args.seed, 2, int(eps * 10)])
                            )
                        )
                        if side != "documents"
                        else Qt
                    )
                    kw = {
                        "documents": m if side != "queries" else None,
                        "queries": m if side != "documents" else None,
                    }
                    plan = RerankPlanner(profile, rng=args.seed, **kw)
                    kth = plan.depth(k=K, recall=TARGET)
                    pred = [plan.recall(x, k=K) for x in (*DEPTHS, kth)]
                    kdoc = RerankPlanner(profile_docs, rng=args.seed, **kw).depth(
                        k=K, recall=TARGET
                    )
                    res, ranks = evaluate(C, Qp @ docs.T, relevant, [*DEPTHS, kth])
                    meas = recall_at_depths(ranks, [*DEPTHS, kth, kdoc])
                    row = {
                        "mechanism": name,
                        "epsilon": eps,
                        "side": side,
                        "guarantee": m.guarantee.describe(),
                        "expected_cosine": round(m.expected_cosine(D.shape[1]), 4),
                        "n_docs": D.shape[0],
                        "n_queries": Qt.shape[0],
                        "ndcg_clean": round(clean, 4),
                        "ndcg_plain": round(res["plain"], 4),
                        "ndcg_rerank_100": round(res[100], 4),
                        "ndcg_rerank_1000": round(res[1000], 4),
                        "ndcg_rerank_theory": round(res[kth], 4),
                        "k_theory": kth,
                        "recall_100": round(meas[0], 4),
                        "recall_1000": round(meas[1], 4),
                        "recall_theory": round(meas[2], 4),
                        "predicted_recall_100": round(pred[0], 4),
                        "predicted_recall_1000": round(pred[1], 4),
                        "predicted_recall_theory": round(pred[2], 4),
                        "k_theory_docprofile": kdoc,
                        "recall_theory_docprofile": round(meas[3], 4),
                        "seconds": round(time.time() - t0, 1),
                    }
                    w.writerow(row)
                    fh.flush()
                    rows.append(row)
                    print(
                        f"{name:11s} eps={eps:7.1f} {side:9s} plain {row['ndcg_plain']:.3f} "
                        f"rr100 {row['ndcg_rerank_100']:.3f} rr1000 {row['ndcg_rerank_1000']:.3f} "
                        f"k'={kth} rr {row['ndcg_rerank_theory']:.3f} recall {row['recall_theory']:.3f} "
                        f"(pred {row['predicted_recall_theory']:.3f}) {row['seconds']} s",
                        flush=True,
                    )
    write_summary(rows, clean)
    lat = latency(D, Qt, C)
    with (HERE / "retrieval_latency.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(lat[0]))
        w.writeheader()
        w.writerows(lat)
    FIGURES.mkdir(exist_ok=True)
    plot(rows, clean, FIGURES / "retrieval_frontier.png")
    err = np.array([r["recall_theory"] - TARGET for r in rows])
    print(
        f"theory k' recall error on test: mean {err.mean():+.4f}, max |err| {np.abs(err).max():.4f}"
    )


if __name__ == "__main__":
    main()
