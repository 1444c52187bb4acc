"""[F26] Table 1 with learned concept masks: which of five concepts does a Mahalanobis mechanism
protect, read from the variance of repeated releases?

Protocol (defaults = the full protocol): five concepts (weekdays, months, countries, gender terms,
city names), masks learned with :func:`privembed.concepts.learn_profile` on all-MiniLM-L6-v2
(``attack_setup.py``), epsilon = 10, N = 10 releases per document, 50 groups of 30 documents per
concept, 3 seeds. Documents come from one mixed pool for every concept (so only the noise can
carry the concept). The defender's noise is

* ``anisotropic`` -- Mahalanobis with the concept's mask ([T26] Alg. 1);
* ``isotropic``   -- Laplace at the same epsilon (every concept looks the same);
* ``smooth λ``    -- Mahalanobis with covariance smoothing λI + (1-λ)Σ ([F26] eq. 6);
* ``permuted``    -- the concept's covariance diagonal under a secret random permutation;

each with fresh noise per release and with keyed noise (:mod:`privembed.keys.keyed`). Attackers:
``template`` (eq. 5, templates = the L1-normalised covariance diagonals the attacker computes from
the candidate masks and the public λ) and ``mlp`` (an MLP trained on the attacker's own simulated
fingerprints from a disjoint document pool). ``across`` = ``releases`` is eq. 4; ``documents`` is
the single-release variant (variance across the documents of a group, one release each).

The mask floor ``mask_delta`` (Σ = diag(m + δ)) is set explicitly: 1e-6 is the paper-like
setting (and the library default until it changed), 1e-2 the new library default; every row of
the outputs names the δ it used.

Run: ``python docs/experiments/attack_fingerprint.py [--seeds 3 --groups 50 ...]``
Outputs: ``attack_fingerprint_runs.csv`` (every run), ``attack_fingerprint.csv`` and
``attack_fingerprint.md`` (mean ± std over seeds), ``docs/figures/attack_fingerprint.png``.
"""

from __future__ import annotations

import argparse
import csv
import secrets
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIGURES = HERE.parent / "figures"
sys.path.insert(0, str(HERE))

from attack_setup import F26_CONCEPTS, doc_pool, profile_path  # noqa: E402

NOISES = ("anisotropic", "isotropic", "smooth 0.2", "smooth 0.9", "smooth 0.99", "permuted")


def mechanisms(noise: str, bases: dict[str, np.ndarray], epsilon: float, rng) -> dict:
    from privembed.attacks import permuted_diagonal
    from privembed.mechanisms import LaplaceMechanism, MahalanobisMechanism

    lam = float(noise.split()[1]) if noise.startswith("smooth") else 0.0
    out = {}
    for c, b in bases.items():
        if noise == "isotropic":
            out[c] = LaplaceMechanism(epsilon=epsilon)
        elif noise == "permuted":
            out[c] = MahalanobisMechanism(epsilon=epsilon, covariance=permuted_diagonal(b, rng))
        else:
            out[c] = MahalanobisMechanism(epsilon=epsilon, covariance=b, smoothing=lam)
    return out


def assumed(noise: str, bases: dict[str, np.ndarray], epsilon: float) -> dict:
    """What the attacker believes each concept's mechanism is (Kerckhoffs: mask and λ public;
    the permutation is secret)."""
    from privembed.mechanisms import MahalanobisMechanism

    lam = float(noise.split()[1]) if noise.startswith("smooth") else 0.0
    return {
        c: MahalanobisMechanism(epsilon=epsilon, covariance=b, smoothing=lam)
        for c, b in bases.items()
    }


def run(args: argparse.Namespace) -> list[dict]:
    import torch

    from privembed.attacks import FingerprintClassifier, TemplateMatcher, simulate_fingerprints
    from privembed.concepts import ConceptProfile
    from privembed.core.rng import spawn
    from privembed.mechanisms.mahalanobis import covariance_from_mask

    torch.set_num_threads(1)
    _t, X_att = doc_pool(args.pool, args.pool_seed + 101)
    _t, X_ref = doc_pool(args.pool, args.pool_seed + 202)
    rows = []
    for lr, delta in [(lr, d) for lr in args.mask_lrs for d in args.mask_deltas]:
        bases = {
            c: covariance_from_mask(ConceptProfile.load(profile_path(c, lr)).mask, delta)
            for c in F26_CONCEPTS
        }
        for seed, gen in enumerate(spawn(args.seed, args.seeds)):
            for randomness in ("fresh", "keyed"):
                key = secrets.token_bytes(32) if randomness == "keyed" else None
                attacker_key = secrets.token_bytes(32) if randomness == "keyed" else None
                for noise in NOISES:
                    acrosses = ("releases", "documents") if randomness == "keyed" else ("releases",)
                    for across in acrosses:
                        t0 = time.time()
                        defender = mechanisms(noise, bases, args.epsilon, gen)
                        believed = assumed(noise, bases, args.epsilon)
                        n_rel = args.releases if across == "releases" else 1
                        sim = dict(
                            n_groups=args.groups,
                            group_size=args.group_size,
                            n_releases=n_rel,
                            across=across,
                        )
                        F, y = simulate_fingerprints(
                            defender, X_att, rng=None if key else gen, key=key, **sim
                        )
                        tm = TemplateMatcher.from_covariances(
                            {c: m.covariance_diagonal for c, m in believed.items()}
                        )
                        reps = {"template": tm.score(F, y)}
                        Fr, yr = simulate_fingerprints(
                            believed,
                            X_ref,
                            rng=None if attacker_key else gen,
                            key=attacker_key,
                            **sim,
                        )
                        clf = FingerprintClassifier(epochs=args.mlp_epochs).fit(Fr, yr, rng=gen)
                        reps["mlp"] = clf.score(F, y)
                        for attacker, rep in reps.items():
                            rows.append(
                                {
                                    "mask_lr": lr,
                                    "mask_delta": delta,
                                    "noise": noise,
                                    "randomness": randomness,
                                    "across": across,
                                    "attacker": attacker,
                                    "seed": seed,
                                    "accuracy": rep.accuracy,
                                    "macro_f1": rep.macro_f1,
                                    "chance": rep.chance,
                                    "n_groups": rep.n_groups,
                                }
                            )
                        _append(args.out / "attack_fingerprint_runs.partial.csv", rows[-2:])
                        print(
                            f"lr={lr:g} delta={delta:g} seed={seed} {randomness:5s} {noise:12s} {across:9s} "
                            f"template={reps['template'].accuracy:.3f} mlp={reps['mlp'].accuracy:.3f} "
                            f"({time.time() - t0:.0f}s)",
                            flush=True,
                        )
    return rows


def _append(path: Path, rows: list[dict]) -> None:
    """Append finished runs at once, so an interrupted run keeps what it measured."""
    new = not path.exists()
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        if new:
            w.writeheader()
        w.writerows(rows)


def summarise(rows: list[dict]) -> list[dict]:
    keys = ("mask_lr", "mask_delta", "noise", "randomness", "across", "attacker")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for k, rs in groups.items():
        acc = np.array([r["accuracy"] for r in rs])
        f1 = np.array([r["macro_f1"] for r in rs])
        out.append(
            {
                **dict(zip(keys, k, strict=True)),
                "accuracy_mean": acc.mean(),
                "accuracy_std": acc.std(ddof=1) if acc.size > 1 else 0.0,
                "macro_f1_mean": f1.mean(),
                "macro_f1_std": f1.std(ddof=1) if f1.size > 1 else 0.0,
                "chance": rs[0]["chance"],
                "seeds": len(rs),
            }
        )
    return out


def markdown(summary: list[dict]) -> str:
    """One table per (mask lr, δ): rows = noise, columns = (randomness, fingerprint, attacker)."""
    cols = [
        ("fresh", "releases", "template"),
        ("fresh", "releases", "mlp"),
        ("keyed", "releases", "template"),
        ("keyed", "releases", "mlp"),
        ("keyed", "documents", "template"),
        ("keyed", "documents", "mlp"),
    ]
    out = []
    for lr, delta in sorted({(r["mask_lr"], r["mask_delta"]) for r in summary}):
        sub = [r for r in summary if r["mask_lr"] == lr and r["mask_delta"] == delta]
        seeds = {r["seeds"] for r in sub}
        out.append(
            f"masks learned with lr={lr:g}, mask_delta={delta:g}; accuracy mean ± std over "
            f"{'/'.join(map(str, sorted(seeds)))} seeds; chance {sub[0]['chance']:.2f}\n"
        )
        head = ["noise"] + [f"{a} {b} {c}" for a, b, c in cols]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for nz in NOISES:
            cells = [nz]
            for a, b, c in cols:
                r = next(
                    (
                        s
                        for s in sub
                        if (s["noise"], s["randomness"], s["across"], s["attacker"])
                        == (nz, a, b, c)
                    ),
                    None,
                )
                cells.append(
                    "" if r is None else f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}"
                )
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["mask_lr"], r["mask_delta"]) for r in summary})
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5.0), squeeze=False)
    series = [
        ("fresh", "releases", "template", "fresh, eq. 4, template"),
        ("fresh", "releases", "mlp", "fresh, eq. 4, MLP"),
        ("keyed", "releases", "template", "keyed, eq. 4, template"),
        ("keyed", "documents", "template", "keyed, across documents, template"),
    ]
    for ax, (lr, delta) in zip(axes[0], panels, strict=True):
        x = np.arange(len(NOISES))
        w = 0.2
        for i, (rnd, acr, att, label) in enumerate(series):
            vals, errs = [], []
            for nz in NOISES:
                r = next(
                    s
                    for s in summary
                    if s["mask_lr"] == lr
                    and s["mask_delta"] == delta
                    and s["noise"] == nz
                    and s["randomness"] == rnd
                    and s["across"] == acr
                    and s["attacker"] == att
                )
                vals.append(r["accuracy_mean"])
                errs.append(r["accuracy_std"])
            ax.bar(x + (i - 1.5) * w, vals, w, yerr=errs, label=label, capsize=2)
        ax.axhline(1 / len(F26_CONCEPTS), color="k", ls="--", lw=1, label="chance")
        ax.set_xticks(x, NOISES, rotation=20)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("concept identification accuracy")
        ax.set_title(f"masks learned with lr={lr:g}, mask_delta={delta:g}")
    axes[0][0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--groups", type=int, default=50, help="groups per concept")
    ap.add_argument("--group-size", type=int, default=30)
    ap.add_argument("--releases", type=int, default=10)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument(
        "--mask-deltas",
        type=float,
        nargs="+",
        default=[1e-6, 1e-2],
        help="Σ = diag(m + δ): 1e-6 paper-like, 1e-2 the new library default",
    )
    ap.add_argument("--mask-lrs", type=float, nargs="+", default=[1e-4, 1e-2])
    ap.add_argument("--pool", type=int, default=1200)
    ap.add_argument("--pool-seed", type=int, default=0)
    ap.add_argument("--mlp-epochs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument(
        "--from-runs",
        type=Path,
        nargs="+",
        help="skip the runs: summarise and plot these run CSVs (e.g. one per mask-lr, run apart)",
    )
    args = ap.parse_args()
    t0 = time.time()
    if args.from_runs:
        rows = []
        for p in args.from_runs:
            with p.open() as fh:
                for r in csv.DictReader(fh):
                    for k in ("mask_lr", "mask_delta", "accuracy", "macro_f1", "chance"):
                        r[k] = float(r[k])
                    rows.append(r)
    else:
        rows = run(args)
    with (args.out / "attack_fingerprint_runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = summarise(rows)
    with (args.out / "attack_fingerprint.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(summary[0]))
        w.writeheader()
        for r in summary:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    (args.out / "attack_fingerprint.md").write_text(markdown(summary))
    figs = FIGURES if args.out.resolve() == HERE else args.out
    figs.mkdir(exist_ok=True)
    plot(summary, figs / "attack_fingerprint.png")
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
