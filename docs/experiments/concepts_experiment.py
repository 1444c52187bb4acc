"""Concept-aware protection on real embeddings (all-MiniLM-L6-v2): masks, sensitivity, utility.

Reproduces, at small scale and on privembed's offline data, the comparisons of [T26]:

* per concept (disease, person, city): mask sparsity, probe validation accuracy with and without
  the mask, and the neuron-sensitivity diagnostic (Def. 7, App. A);
* the lambda sweep of [T26] Table 10 (sparsity and probe accuracy against lambda);
* Mahalanobis (the learned masks, lambda 1e-3 and 1e-2; the sparse one also with
  ``mask_delta=1e-2`` and with ``smoothing=0.5``) against isotropic Laplace at the same epsilon
  ([T26] Table 1): mean cosine to the original, top-1 self-retrieval, and two leakage proxies --
  logistic probes trained on *protected* D+/D- vectors to tell whether the concept is present
  (0.5 = chance): a plain one, and a mask-aware one that keeps only the dimensions the sparse mask
  closes, renormalises and standardises them. The token-inference (MLC) leakage of [T26] needs
  the attacks module and is not run here.

Data: for each concept, ``generate_sentences(concept, n, rng=seed)`` (seeded templates filled
by Faker / faker-healthcare-provider), D- = R(D+, C). 30% of the pairs are held out from mask
learning; utility, leakage and the sensitivity diagnostic use only those.

Run (about 3-5 minutes on 2 cores when embeddings are not cached yet):
    python docs/experiments/concepts_experiment.py [--n 1000] [--seed 0]
Writes docs/experiments/concepts/*.csv, *.md and *.png.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Any

import numpy as np

CONCEPTS = ("disease", "person", "city")
EPSILONS_T1 = (5.0, 10.0, 20.0)  # [T26] Table 1
EPSILONS_EXTRA = (50.0, 100.0, 200.0)  # where the utility/leakage differences become visible
LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1)  # [T26] Table 10
LR = 5e-3  # see docs/concepts.md: with ~1,300 training examples, 1e-4 cannot move the gates far
PROFILE_LAMBDAS = (1e-3, 1e-2)  # the masks compared with Laplace
HELD_OUT = 0.3


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def _md_table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _probe_accuracy(P: np.ndarray, N: np.ndarray, *, standardise: bool) -> float:
    """Logistic probe D+ vs D-: fit on the first half of the pairs, score on the second."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    n = P.shape[0]
    half = n // 2
    Xtr = np.vstack([P[:half], N[:half]])
    ytr = np.r_[np.ones(half), np.zeros(half)]
    Xte = np.vstack([P[half:], N[half:]])
    yte = np.r_[np.ones(n - half), np.zeros(n - half)]
    lr = LogisticRegression(C=1.0, max_iter=3000)
    clf = make_pipeline(StandardScaler(), lr) if standardise else lr
    return float(clf.fit(Xtr, ytr).score(Xte, yte))


def _leakage(
    mech: Any, Pp: np.ndarray, Pn: np.ndarray, seed: int, dims: np.ndarray
) -> tuple[float, float]:
    """Two presence probes on protected D+/D- vectors (0.5 = chance).

    ``plain``: logistic regression on the protected vectors. ``mask-aware``: an attacker who
    knows the profile keeps the dimensions ``dims`` (those the mask closes), renormalises that
    sub-vector and standardises it -- the dimensions Mahalanobis leaves (almost) noise-free.
    """
    if mech is not None:
        Pp = mech.privatize(Pp, rng=seed)
        Pn = mech.privatize(Pn, rng=seed + 1)

    def sub(A: np.ndarray) -> np.ndarray:
        B = A[:, dims]
        return B / np.maximum(np.linalg.norm(B, axis=1, keepdims=True), 1e-300)

    return (
        _probe_accuracy(Pp, Pn, standardise=False),
        _probe_accuracy(sub(Pp), sub(Pn), standardise=True),
    )


MECHANISMS = (
    "laplace",
    "mahalanobis lam=1e-3",
    "mahalanobis lam=1e-2",
    "mahalanobis lam=1e-2, delta=1e-2",
    "mahalanobis lam=1e-2, smoothing=0.5",
)


def _mechanisms(eps: float, results: dict[float, Any]) -> list[tuple[str, Any]]:
    from privembed import LaplaceMechanism, MahalanobisMechanism

    dense, sparse = results[PROFILE_LAMBDAS[0]].mask, results[PROFILE_LAMBDAS[1]].mask
    mechs = (
        LaplaceMechanism(epsilon=eps),
        MahalanobisMechanism(epsilon=eps, mask=dense),
        MahalanobisMechanism(epsilon=eps, mask=sparse),
        MahalanobisMechanism(epsilon=eps, mask=sparse, mask_delta=1e-2),
        MahalanobisMechanism(epsilon=eps, mask=sparse, smoothing=0.5),
    )
    return list(zip(MECHANISMS, mechs, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000, help="sentences per concept")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "concepts")
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from privembed.concepts import (
        MaskLearner,
        build_pairs,
        builtin_concept,
        embed_texts,
        generate_sentences,
        sensitivity_diagnostic,
    )
    from privembed.data.embedders import Embedder
    from privembed.evaluation.metrics import mean_cosine, self_retrieval

    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    emb = Embedder()
    summary_rows, sweep_rows, utility_rows = [], [], []
    masks: dict[str, np.ndarray] = {}
    sens_sorted: dict[str, np.ndarray] = {}
    for concept in CONCEPTS:
        t0 = time.perf_counter()
        c = builtin_concept(concept)
        pairs = build_pairs(generate_sentences(concept, args.n, rng=args.seed), c)
        X = embed_texts(
            [*pairs.positives, *pairs.negatives], embedder=emb, cache_dir=args.cache_dir
        )
        n = len(pairs)
        order = np.random.default_rng(args.seed).permutation(n)
        n_eval = round(HELD_OUT * n)
        ev, tr = np.sort(order[:n_eval]), np.sort(order[n_eval:])
        Xp, Xn = X[:n], X[n:]
        t_embed = time.perf_counter() - t0

        # lambda sweep (Table 10); lambda = 1e-3 is the profile used below
        results = {}
        for lam in LAMBDAS:
            res = MaskLearner(lr=LR, lam=lam, baseline_epochs=20 if lam == LAMBDAS[0] else 0).fit(
                Xp[tr], Xn[tr], rng=args.seed
            )
            diag = sensitivity_diagnostic(Xp[ev], Xn[ev], res.log_alpha)
            results[lam] = res
            sweep_rows.append(
                {
                    "concept": concept,
                    "lambda": lam,
                    "lr": LR,
                    "sparsity": res.sparsity,
                    "n_selected": int(res.selected.size),
                    "mask_mean": float(res.mask.mean()),
                    "val_acc_masked": res.val_accuracy_masked,
                    "sens_ratio_top_bottom": diag.ratio,
                    "wilcoxon_p": diag.wilcoxon_pvalue,
                    "train_s": res.seconds,
                }
            )
        if concept == CONCEPTS[0]:  # the paper's learning rate, for reference
            ref = MaskLearner(lam=1e-3, baseline_epochs=0).fit(Xp[tr], Xn[tr], rng=args.seed)
            sweep_rows.append(
                {
                    "concept": concept,
                    "lambda": 1e-3,
                    "lr": 1e-4,
                    "sparsity": ref.sparsity,
                    "n_selected": int(ref.selected.size),
                    "mask_mean": float(ref.mask.mean()),
                    "val_acc_masked": ref.val_accuracy_masked,
                    "sens_ratio_top_bottom": sensitivity_diagnostic(
                        Xp[ev], Xn[ev], ref.log_alpha
                    ).ratio,
                    "wilcoxon_p": float("nan"),
                    "train_s": ref.seconds,
                }
            )
        unmasked = results[LAMBDAS[0]].val_accuracy_unmasked
        for lam in PROFILE_LAMBDAS:
            res = results[lam]
            diag = sensitivity_diagnostic(Xp[ev], Xn[ev], res.log_alpha)
            summary_rows.append(
                {
                    "concept": concept,
                    "lambda": lam,
                    "n_pairs": n,
                    "n_without_concept": pairs.n_without_concept,
                    "pairs_mask_learning": int(tr.size),
                    "pairs_held_out": int(ev.size),
                    "sparsity": res.sparsity,
                    "n_selected": int(res.selected.size),
                    "mask_mean": float(res.mask.mean()),
                    "val_acc_masked": res.val_accuracy_masked,
                    "val_acc_unmasked": unmasked,
                    "sens_top10": diag.top_mean_sensitivity,
                    "sens_bottom10": diag.bottom_mean_sensitivity,
                    "sens_ratio": diag.ratio,
                    "wilcoxon_p": diag.wilcoxon_pvalue,
                    "ranksum_p": diag.ranksum_pvalue,
                    "embed_s": t_embed,
                }
            )
        main_res = results[PROFILE_LAMBDAS[-1]]
        masks[concept] = main_res.mask
        delta = np.abs(Xp[ev] - Xn[ev]).max(axis=0)
        sens_sorted[concept] = delta[np.argsort(-main_res.log_alpha, kind="stable")]

        # Table 1: Mahalanobis (mask) vs Laplace at the same epsilon, on held-out pairs
        Ep, En = Xp[ev].astype(np.float64), Xn[ev].astype(np.float64)
        sparse_mask = results[PROFILE_LAMBDAS[-1]].mask
        dims = np.flatnonzero(sparse_mask == 0)
        if dims.size < 10:  # nothing closed: the attacker takes the lower half by log alpha
            dims = np.argsort(results[PROFILE_LAMBDAS[-1]].log_alpha)[: sparse_mask.size // 2]
        plain, aware = _leakage(None, Ep, En, args.seed, dims)
        utility_rows.append(
            {
                "concept": concept,
                "mechanism": "none",
                "epsilon": float("inf"),
                "mean_cosine": 1.0,
                "top1_retrieval": self_retrieval(Ep, Ep),
                "leak_plain": plain,
                "leak_mask_aware": aware,
            }
        )
        for eps in (*EPSILONS_T1, *EPSILONS_EXTRA):
            for label, mech in _mechanisms(eps, results):
                Y = mech.privatize(Ep, rng=args.seed + 7)
                plain, aware = _leakage(mech, Ep, En, args.seed + 11, dims)
                utility_rows.append(
                    {
                        "concept": concept,
                        "mechanism": label,
                        "epsilon": eps,
                        "mean_cosine": mean_cosine(Ep, Y),
                        "top1_retrieval": self_retrieval(Y, Ep),
                        "leak_plain": plain,
                        "leak_mask_aware": aware,
                    }
                )
        print(f"{concept}: done in {time.perf_counter() - t0:.0f}s", flush=True)

    _write_csv(args.out / "concepts_summary.csv", summary_rows)
    _write_csv(args.out / "concepts_lambda_sweep.csv", sweep_rows)
    _write_csv(args.out / "concepts_utility.csv", utility_rows)
    _plots(args.out, sweep_rows, utility_rows, masks, sens_sorted)
    total = time.perf_counter() - t_start
    md = [
        f"<!-- generated by docs/experiments/concepts_experiment.py --n {args.n} "
        f"--seed {args.seed}; {total:.0f} s -->",
        f"### Masks (lr = {LR:g}; probe accuracies on the learner's 10% validation pairs)",
        _md_table(
            summary_rows,
            [
                "concept",
                "lambda",
                "n_pairs",
                "sparsity",
                "n_selected",
                "mask_mean",
                "val_acc_masked",
                "val_acc_unmasked",
                "sens_top10",
                "sens_bottom10",
                "wilcoxon_p",
            ],
        ),
        "",
        "### Lambda sweep ([T26] Table 10)",
        _md_table(
            sweep_rows,
            [
                "concept",
                "lambda",
                "lr",
                "sparsity",
                "n_selected",
                "mask_mean",
                "val_acc_masked",
                "sens_ratio_top_bottom",
            ],
        ),
        "",
        "### Mahalanobis vs Laplace at the same epsilon ([T26] Table 1)",
        _md_table(
            utility_rows,
            [
                "concept",
                "mechanism",
                "epsilon",
                "mean_cosine",
                "top1_retrieval",
                "leak_plain",
                "leak_mask_aware",
            ],
        ),
        "",
    ]
    (args.out / "concepts_results.md").write_text("\n".join(md), encoding="utf-8")
    print(f"total {total:.0f}s; wrote {args.out}")


def _plots(
    out: Path,
    sweep: list[dict[str, Any]],
    utility: list[dict[str, Any]],
    masks: dict[str, np.ndarray],
    sens_sorted: dict[str, np.ndarray],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for concept in CONCEPTS:
        rows = [r for r in sweep if r["concept"] == concept and r["lr"] == LR]
        lams = [r["lambda"] for r in rows]
        ax[0].semilogx(lams, [r["sparsity"] for r in rows], "o-", label=concept)
        ax[1].semilogx(lams, [r["val_acc_masked"] for r in rows], "o-", label=concept)
    ax[0].set(xlabel="lambda", ylabel="mask sparsity (share of m = 0)", title="Sparsity vs lambda")
    ax[1].set(
        xlabel="lambda", ylabel="probe val. accuracy (masked)", title="Probe accuracy vs lambda"
    )
    ax[0].legend()
    fig.tight_layout()
    fig.savefig(out / "concepts_lambda_sweep.png", dpi=120)
    plt.close(fig)

    metrics = (
        ("mean_cosine", "mean cosine to original"),
        ("top1_retrieval", "top-1 self-retrieval"),
        ("leak_plain", "presence probe (plain)"),
        ("leak_mask_aware", "presence probe (mask-aware)"),
    )
    fig, ax = plt.subplots(len(CONCEPTS), len(metrics), figsize=(15, 3.2 * len(CONCEPTS)))
    for i, concept in enumerate(CONCEPTS):
        for j, (key, title) in enumerate(metrics):
            a = ax[i, j]
            for k, mech in enumerate(MECHANISMS):
                rows = [r for r in utility if r["concept"] == concept and r["mechanism"] == mech]
                a.semilogx(
                    [r["epsilon"] for r in rows],
                    [r[key] for r in rows],
                    "o-" if k else "o:",
                    color=f"C{k}",
                    ms=3,
                    label=mech,
                )
            for e in EPSILONS_T1:
                a.axvline(e, color="0.85", lw=0.8, zorder=0)
            if key.startswith("leak"):
                a.axhline(0.5, color="0.5", lw=0.8)
                none = [
                    r[key] for r in utility if r["concept"] == concept and r["mechanism"] == "none"
                ]
                a.axhline(none[0], color="k", lw=0.8, ls="--")
            a.set(title=f"{concept}: {title}", xlabel="epsilon")
    ax[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "concepts_utility.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for concept in CONCEPTS:
        ax[0].plot(np.sort(masks[concept])[::-1], label=concept)
        s = sens_sorted[concept]
        k = 10
        ax[1].plot(np.convolve(s, np.ones(k) / k, mode="valid"), label=concept)
    ax[0].set(
        xlabel="dimension (sorted by mask)",
        ylabel="mask value",
        title=f"Learned masks (lambda = {PROFILE_LAMBDAS[-1]:g})",
    )
    ax[1].set(
        xlabel="dimension rank by log alpha",
        ylabel="sensitivity Delta_i (moving avg. of 10)",
        title="Neuron sensitivity vs mask rank (held-out pairs)",
    )
    ax[0].legend()
    fig.tight_layout()
    fig.savefig(out / "concepts_masks.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
