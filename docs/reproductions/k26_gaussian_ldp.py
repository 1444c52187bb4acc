"""[K26] reproduced on real embeddings: Gaussian LDP (classic and analytic) and empirical noise.

[K26] (Kaliutau 2026) adds Gaussian noise to unit-normalised 1920-d clinical vectors and reports
top-1 retrieval (is a protected vector's own original its nearest original?) and the mean cosine
between protected and original vectors, against epsilon (Gaussian LDP, classic calibration
sigma = 2 sqrt(2 ln(1.25/delta)) / epsilon, delta = 1e-5) and against an empirical sigma. Its
conclusions: LDP needs epsilon >= 50 for full top-1 retrieval; sigma_emp = 0.2 keeps top-1 while
the mean cosine drops to about 0.116.

Here: all-MiniLM-L6-v2 (d = 384) on the 2,532 distinct sentences of the Lee background corpus
(gensim's bundled data), with privembed's sweep (5 runs per configuration, independent spawned
streams) and ``UtilityEvaluator`` (exact ranks over all 2,532 rows, ties counted against):

* ``gaussian`` with ``calibration="classic"`` (what [K26] used) and ``"analytic"`` (Balle & Wang),
  epsilon in EPSILONS;
* ``empirical`` (fixed sigma), sigma in SIGMAS.

Run (about 2-4 minutes on 2 idle cores once the sentences are embedded; embedding them takes
a few minutes and is cached under ~/.cache/privembed):

    python docs/reproductions/k26_gaussian_ldp.py

Writes ``k26_results.csv`` (one row per configuration: sigma, the guarantee record, the true
delta of the classic sigma, closed forms, measured means +- std) and ``k26_figure1.png`` next
to this file, and prints the Markdown tables of ``k26.md``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, embed_cached, markdown

EPSILONS = (1.0, 2.0, 5.0, 10.0, 20.0, 35.0, 50.0, 70.0, 100.0, 200.0)
SIGMAS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
DELTA = 1e-5
K26_D = 1920


def run(runs: int, seed: int) -> tuple[list[dict], int, int]:
    from privembed.core import theory
    from privembed.evaluation import UtilityEvaluator, grid, run_sweep
    from privembed.evaluation.loaders import lee_background

    texts = lee_background(sentences=True)
    X = embed_cached("lee_sentences", texts)
    n, d = X.shape
    configs = grid(
        ["gaussian", "empirical"],
        epsilon=EPSILONS,
        delta=DELTA,
        sigma=SIGMAS,
        params={"gaussian": {"calibration": ["classic", "analytic"]}},
    )
    ev = UtilityEvaluator(X, n_queries=None, ks=(1, 10), neighbours=10)
    t0 = time.time()
    res = run_sweep(X, configs, runs=runs, seed=seed, utility=ev)
    print(
        f"[k26] {len(configs)} configurations x {runs} runs on {n} x {d}: {time.time() - t0:.0f}s"
    )
    rows = []
    for c in res.configs:
        m = c.build()
        g = m.guarantee
        sigma = float(m.sigma)  # type: ignore[attr-defined]
        row = {
            "mechanism": c.mechanism,
            "calibration": c.params.get("calibration", "empirical"),
            "epsilon": c.params.get("epsilon"),
            "sigma": sigma,
            "guarantee": g.short(),
            "guarantee_detail": g.describe(),
            "true_delta_at_epsilon": getattr(m, "achieved_delta", None),
            "epsilon_at_1e-5": theory.analytic_gaussian_epsilon(sigma, DELTA, 2.0),
            "closed_form_cos_d384": 1.0 / math.sqrt(1.0 + d * sigma**2),
            "closed_form_cos_d1920": 1.0 / math.sqrt(1.0 + K26_D * sigma**2),
            "exact_expected_cos": theory.expected_cosine_gaussian(sigma, d),
        }
        for metric in ("top1_originals", "recall@10_originals", "mean_cosine", "knn_overlap@10"):
            mean, std, _ = res.stats(c, metric)
            row[metric] = mean
            row[metric + "_std"] = std
        rows.append(row)
    return rows, n, d


def run_padded(runs: int, seed: int) -> list[dict]:
    """The same sentences zero-padded to [K26]'s d = 1920 (an isometry: every cosine and every
    distance between originals is unchanged), protected with the same sigmas.

    Top-1 depends on sigma and the gaps between a sentence and its competitors, which padding
    does not change; the mean cosine to the original falls to the d = 1920 closed form.
    """
    from privembed.evaluation import UtilityEvaluator, grid, run_sweep
    from privembed.evaluation.loaders import lee_background

    X = embed_cached("lee_sentences", lee_background(sentences=True))
    rows = []
    for d in (X.shape[1], K26_D):
        Xd = np.hstack([X, np.zeros((X.shape[0], d - X.shape[1]), dtype=X.dtype)])
        configs = grid(
            ["gaussian", "empirical"],
            epsilon=(35.0, 50.0, 70.0),
            delta=DELTA,
            sigma=(0.15, 0.2, 0.25),
            params={"gaussian": {"calibration": ["classic"]}},
        )
        ev = UtilityEvaluator(Xd, n_queries=None, ks=(1,), neighbours=0)
        res = run_sweep(Xd, configs, runs=runs, seed=seed, utility=ev)
        for c in res.configs:
            m = c.build()
            r = {
                "d": d,
                "configuration": c.label,
                "sigma": float(m.sigma),  # type: ignore[attr-defined]
                "closed_form_cos": 1.0 / math.sqrt(1.0 + d * float(m.sigma) ** 2),  # type: ignore[attr-defined]
            }
            for metric in ("top1_originals", "mean_cosine"):
                r[metric], r[metric + "_std"], _ = res.stats(c, metric)
            rows.append(r)
    return rows


def plot(rows: list[dict], path: Path, n: int, d: int) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.4))
    FigureCanvasAgg(fig)
    ax1, ax2, ax3 = fig.subplots(1, 3)
    style = {"classic": ("#d62728", "o-"), "analytic": ("#1f77b4", "s-")}
    for cal, (colour, fmt) in style.items():
        rs = [r for r in rows if r["calibration"] == cal]
        eps = [r["epsilon"] for r in rs]
        ax1.errorbar(eps, [r["top1_originals"] for r in rs], [r["top1_originals_std"] for r in rs],
                     fmt=fmt, color=colour, capsize=3, label=f"Gaussian LDP, {cal} sigma")  # fmt: skip
        ax2.errorbar(eps, [r["mean_cosine"] for r in rs], [r["mean_cosine_std"] for r in rs],
                     fmt=fmt, color=colour, capsize=3, label=f"{cal} sigma")  # fmt: skip
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("epsilon (delta = 1e-5)")
        ax.axvline(50, color="grey", ls=":", lw=1)
        ax.grid(alpha=0.3)
    ax1.set_ylabel(f"top-1 retrieval among {n} originals")
    ax1.set_title("top-1 vs epsilon ([K26] Fig. 1 left)", fontsize=10)
    ax2.set_ylabel("mean cosine(protected, original)")
    ax2.set_title("mean cosine vs epsilon ([K26] Fig. 1 right)", fontsize=10)
    ax1.legend(fontsize=8)
    # everything against sigma: the three mechanisms fall on one curve
    for cal, colour, marker in (("classic", "#d62728", "o"), ("analytic", "#1f77b4", "s"),
                                ("empirical", "#2ca02c", "D")):  # fmt: skip
        rs = sorted((r for r in rows if r["calibration"] == cal), key=lambda r: r["sigma"])
        s = [r["sigma"] for r in rs]
        ax3.plot(s, [r["top1_originals"] for r in rs], marker, color=colour, ms=5,
                 label=f"top-1, {cal}")  # fmt: skip
        ax3.plot(s, [r["mean_cosine"] for r in rs], marker, color=colour, ms=5, mfc="none",
                 label=f"mean cos, {cal}")  # fmt: skip
    grid_s = np.geomspace(0.02, 2.0, 200)
    ax3.plot(
        grid_s, 1 / np.sqrt(1 + d * grid_s**2), "k-", lw=1, label=f"1/sqrt(1+d sigma^2), d={d}"
    )
    ax3.plot(grid_s, 1 / np.sqrt(1 + K26_D * grid_s**2), "k--", lw=1,
             label=f"same, d={K26_D} ([K26])")  # fmt: skip
    ax3.plot([0.2], [0.116], "k*", ms=12, label="[K26]: sigma 0.2 -> cos 0.116")
    ax3.set_xscale("log")
    ax3.set_xlabel("noise sigma per coordinate")
    ax3.set_title("everything vs sigma", fontsize=10)
    ax3.grid(alpha=0.3)
    ax3.legend(fontsize=7)
    fig.subplots_adjust(left=0.05, right=0.99, top=0.92, bottom=0.12, wspace=0.25)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--part", choices=("all", "main", "padded"), default="all")
    args = ap.parse_args()
    if args.part in ("all", "padded"):
        t0 = time.time()
        prow = run_padded(args.runs, args.seed)
        print(f"[k26] padded: {time.time() - t0:.0f}s")
        with (HERE / "k26_padded.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(prow[0]))
            w.writeheader()
            for r in prow:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        for r in prow:
            r["top1 ± std"] = f"{r['top1_originals']:.3f} ± {r['top1_originals_std']:.3f}"
            r["mean cos ± std"] = f"{r['mean_cosine']:.4f} ± {r['mean_cosine_std']:.4f}"
        print("\n### zero-padded to d = 1920\n")
        print(markdown(prow, ["d", "configuration", "sigma", "top1 ± std", "mean cos ± std",
                              "closed_form_cos"], digits=4))  # fmt: skip
        if args.part == "padded":
            return
    rows, n, d = run(args.runs, args.seed)
    with (HERE / "k26_results.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    plot(rows, HERE / "k26_figure1.png", n, d)
    for r in rows:
        r["top1 ± std"] = f"{r['top1_originals']:.3f} ± {r['top1_originals_std']:.3f}"
        r["mean cos ± std"] = f"{r['mean_cosine']:.4f} ± {r['mean_cosine_std']:.4f}"
        r["cos d=384 / 1920 (closed form)"] = (
            f"{r['closed_form_cos_d384']:.3f} / {r['closed_form_cos_d1920']:.3f}"
        )
    for cal in ("classic", "analytic", "empirical"):
        rs = [r for r in rows if r["calibration"] == cal]
        key = "sigma" if cal == "empirical" else "epsilon"
        cols = [key, "sigma", "guarantee", "top1 ± std", "mean cos ± std",
                "cos d=384 / 1920 (closed form)"]  # fmt: skip
        if cal == "classic":
            cols.insert(3, "true_delta_at_epsilon")
        if cal == "empirical":
            cols.insert(3, "epsilon_at_1e-5")
        print(f"\n### {cal}\n")
        print(markdown(rs, list(dict.fromkeys(cols)), digits=4))


if __name__ == "__main__":
    main()
