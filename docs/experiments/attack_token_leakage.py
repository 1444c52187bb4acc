"""Token leakage of protected embeddings under the adaptive MLC attack, like [T26] Table 1.

Corpus: synthetic clinical notes (templates + Faker, :func:`privembed.attacks.pii_corpus`),
embedded with all-MiniLM-L6-v2 (``attack_setup.py`` caches them). Sensitive tokens: the words of
each note's name, age, city, disease, symptom and drug that occur in its text.

Per seed the notes are split in half: the attacker's auxiliary half (texts + embeddings it
protects itself with the *same* mechanism and parameters: the adaptive attacker of [T26]) and
the victim half (protected once, attacked). Attack: :class:`privembed.attacks.MLCAttack` with
[T26] App. I.3's configuration (MLP 512-256-128, BCE, 20 epochs, batch 64, lr 1e-4).
Mechanisms: none, Laplace, Mahalanobis with the combined PII concept mask (person, city, disease,
symptom, drug; masks from ``attack_setup.py``) and Purkayastha, at epsilon in {5, 10, 20, 40};
5 seeds. A Mahalanobis spec names its mask-learning rate and mask floor δ (Σ = diag(m + δ)):
``mahalanobis@lr0.01@delta0.01`` (δ = 1e-2, the new library default) or ``...@delta1e-06``.

Run: ``python docs/experiments/attack_token_leakage.py [--seeds 5 --notes 3000]``
Outputs: ``attack_token_leakage_runs.csv``, ``attack_token_leakage.csv`` and
``attack_token_leakage.md`` (mean ± std), ``docs/figures/attack_token_leakage.png``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent / "figures"
sys.path.insert(0, str(HERE))

from attack_setup import pii_corpus, profile_path  # noqa: E402

EPSILONS = (5.0, 10.0, 20.0, 40.0)


def mechanism(name: str, eps: float, args: argparse.Namespace):
    from privembed.concepts import ConceptProfile
    from privembed.mechanisms import LaplaceMechanism, MahalanobisMechanism, PurkayasthaMechanism

    if name == "laplace":
        return LaplaceMechanism(epsilon=eps)
    if name == "purkayastha":
        return PurkayasthaMechanism(epsilon=eps)
    if not name.startswith("mahalanobis@lr") or "@delta" not in name:
        raise ValueError(
            f"mechanism must be laplace, purkayastha or mahalanobis@lr<lr>@delta<δ>, got {name!r}."
        )
    lr_s, delta_s = name.removeprefix("mahalanobis@lr").split("@delta")
    mask = ConceptProfile.load(profile_path("pii", float(lr_s))).mask
    return MahalanobisMechanism(epsilon=eps, mask=mask, mask_delta=float(delta_s))


def run(args: argparse.Namespace) -> list[dict]:
    import torch

    from privembed.attacks import MLCAttack
    from privembed.attacks.corpus import sensitive_tokens
    from privembed.core.rng import spawn
    from privembed.evaluation.metrics import mean_cosine, self_retrieval

    torch.set_num_threads(1)
    notes, X = pii_corpus(args.notes, args.corpus_seed)
    texts = [n.text for n in notes]
    sens = [sensitive_tokens(n) for n in notes]
    mechs = args.mechanisms or ["laplace", "mahalanobis@lr0.01@delta0.01", "purkayastha"]
    rows = []
    for seed, gen in enumerate(spawn(args.seed, args.seeds)):
        perm = gen.permutation(len(texts))
        aux, tgt = np.sort(perm[: len(texts) // 2]), np.sort(perm[len(texts) // 2 :])
        a_tx, t_tx = [texts[i] for i in aux], [texts[i] for i in tgt]
        t_sens = [sens[i] for i in tgt]
        configs = [("none", float("inf"))] if args.unprotected else []
        configs += [(m, e) for m in mechs for e in args.epsilons]
        for name, eps in configs:
            t0 = time.time()
            atk = MLCAttack(epochs=args.epochs, lr=args.lr)
            if name == "none":
                atk.fit(a_tx, X[aux], rng=gen)
                Y = X[tgt]
            else:
                mech = mechanism(name, eps, args)
                atk.fit_adaptive(a_tx, X[aux], mech, rng=gen)
                Y = mech.privatize(X[tgt], rng=gen)
            r = atk.score(t_tx, Y, sensitive=t_sens)
            atk.top_k = args.top_k
            rk = atk.score(t_tx, Y, sensitive=t_sens)
            row = {
                "mechanism": name,
                "epsilon": eps,
                "seed": seed,
                "leakage": r.leakage,
                "leakage_chance": r.leakage_chance,
                "confidence": r.confidence,
                "auc_sensitive": r.auc_sensitive,
                "auc_all": r.auc_all,
                f"leakage_top{args.top_k}": rk.leakage,
                f"leakage_top{args.top_k}_chance": rk.leakage_chance,
                "mean_cosine": mean_cosine(Y, X[tgt]),
                "top1_linkage": self_retrieval(Y, X[tgt]),
                "n_target": len(tgt),
                "n_sensitive": r.n_sensitive,
                "sensitive_in_vocabulary": r.sensitive_in_vocabulary,
            }
            rows.append(row)
            _append(args.out / "attack_token_leakage_runs.partial.csv", row)
            print(
                f"seed={seed} {name:20s} eps={eps:<4g} leak={r.leakage:.4f} "
                f"leak@top{args.top_k}={rk.leakage:.4f} (blind {rk.leakage_chance:.4f}) "
                f"conf={r.confidence:.4f} auc={r.auc_sensitive:.3f} cos={row['mean_cosine']:.3f} "
                f"({time.time() - t0:.0f}s)",
                flush=True,
            )
    return rows


def _append(path: Path, row: dict) -> None:
    """Append a finished run at once, so an interrupted run keeps what it measured."""
    new = not path.exists()
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(row))
        if new:
            w.writeheader()
        w.writerow(row)


def summarise(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["mechanism"], r["epsilon"]), []).append(r)
    metrics = [k for k in rows[0] if k not in ("mechanism", "epsilon", "seed", "n_target")]
    out = []
    for (m, e), rs in groups.items():
        row: dict = {"mechanism": m, "epsilon": e, "seeds": len(rs)}
        for k in metrics:
            v = np.array([r[k] for r in rs], dtype=float)
            row[f"{k}_mean"] = v.mean()
            row[f"{k}_std"] = v.std(ddof=1) if v.size > 1 else 0.0
        out.append(row)
    return out


def markdown(summary: list[dict], top_k: int) -> str:
    """[T26] Table 1 layout: one row per mechanism, one column per epsilon (mean ± std)."""
    eps = sorted({r["epsilon"] for r in summary if r["mechanism"] != "none"})
    names = list(dict.fromkeys(r["mechanism"] for r in summary))
    out = []
    for key, title in (
        ("leakage", "Leakage (recovered: p >= 0.5)"),
        (f"leakage_top{top_k}", f"Leakage (recovered: top-{top_k})"),
        ("confidence", "Confidence"),
        ("auc_sensitive", "per-token AUC (sensitive tokens)"),
        ("mean_cosine", "mean cosine to the original"),
        ("top1_linkage", "top-1 re-identification among the victim notes (linkage; chance 1/n)"),
    ):
        out.append(f"{title}, mean ± std over seeds\n")
        head = ["mechanism", "seeds"] + [f"ε = {e:g}" for e in eps]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for m in names:
            rs = {r["epsilon"]: r for r in summary if r["mechanism"] == m}
            if m == "none":
                r = next(iter(rs.values()))
                cell = f"{r[key + '_mean']:.4f} ± {r[key + '_std']:.4f}"
                out.append(
                    f"| none (unprotected) | {r['seeds']} | " + " | ".join([cell] * len(eps)) + " |"
                )
                continue
            seeds = "/".join(str(int(rs[e]["seeds"])) for e in eps if e in rs)
            cells = [
                f"{rs[e][key + '_mean']:.4f} ± {rs[e][key + '_std']:.4f}" if e in rs else ""
                for e in eps
            ]
            out.append(f"| {m} | {seeds} | " + " | ".join(cells) + " |")
        if key.startswith("leakage"):
            ch = [r[key + "_chance_mean"] for r in summary]
            out.append(f"\nblind (frequency-only) baseline: {min(ch):.4f} to {max(ch):.4f}")
        out.append("")
    return "\n".join(out)


def plot(summary: list[dict], top_k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    names = [m for m in dict.fromkeys(r["mechanism"] for r in summary) if m != "none"]
    base = next((r for r in summary if r["mechanism"] == "none"), None)
    panels = (
        ("leakage", "Leakage (p >= 0.5)"),
        (f"leakage_top{top_k}", f"Leakage (top-{top_k})"),
        ("auc_sensitive", "per-token AUC (sensitive)"),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        for m in names:
            rs = sorted((r for r in summary if r["mechanism"] == m), key=lambda r: r["epsilon"])
            ax.errorbar(
                [r["epsilon"] for r in rs],
                [r[f"{key}_mean"] for r in rs],
                yerr=[r[f"{key}_std"] for r in rs],
                marker="o",
                capsize=3,
                label=m,
            )
        if base is not None:
            ax.axhline(base[f"{key}_mean"], color="k", ls="--", lw=1, label="unprotected")
        if key.startswith("leakage_top") and base is not None:
            ax.axhline(base[f"{key}_chance_mean"], color="grey", ls=":", lw=1, label="blind guess")
        if key == "auc_sensitive":
            ax.axhline(0.5, color="grey", ls=":", lw=1, label="chance")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("epsilon")
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--corpus-seed", type=int, default=0)
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    ap.add_argument("--epochs", type=int, default=40, help="[T26]: 20 (see docs/attacks.md)")
    ap.add_argument("--lr", type=float, default=3e-3, help="[T26]: 1e-4 (see docs/attacks.md)")
    ap.add_argument(
        "--mechanisms",
        nargs="+",
        help="laplace, mahalanobis@lr<mask lr>@delta<mask delta>, purkayastha "
        "(default: laplace mahalanobis@lr0.01@delta0.01 purkayastha)",
    )
    ap.add_argument(
        "--unprotected", action=argparse.BooleanOptionalAction, default=True, help="include 'none'"
    )
    ap.add_argument("--from-runs", type=Path, nargs="+", help="summarise these run CSVs instead")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    t0 = time.time()
    if args.from_runs:
        rows = []
        for p in args.from_runs:
            with p.open() as fh:
                for r in csv.DictReader(fh):
                    rows.append({k: (v if k == "mechanism" else float(v)) for k, v in r.items()})
    else:
        rows = run(args)
    with (args.out / "attack_token_leakage_runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = summarise(rows)
    with (args.out / "attack_token_leakage.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(summary[0]))
        w.writeheader()
        for r in summary:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    (args.out / "attack_token_leakage.md").write_text(markdown(summary, args.top_k))
    figs = FIGURES if args.out.resolve() == HERE else args.out
    figs.mkdir(exist_ok=True)
    plot(summary, args.top_k, figs / "attack_token_leakage.png")
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
