"""Averaging attack on the PII corpus: cosine to the original and token leakage vs N releases,
fresh noise vs keyed noise.

The attacker averages N releases of each victim note, rescales the average to unit length
(post-processing of its own; the MLC z-scores its inputs with the statistics of unit vectors)
and runs an MLC token attack trained on *unprotected* auxiliary embeddings (the average converges
to the unprotected embedding, so that is the model it wants). The MLC is trained with 40 epochs
at lr 3e-3 (as in ``attack_token_leakage.py``; [T26]'s 20 epochs at lr 1e-4 underfit 1,500 notes). Fresh noise: the orthogonal noise of the average shrinks like 1/sqrt(N)
(prediction: :func:`privembed.attacks.expected_average_cosine`). Keyed noise: every release is
identical, nothing moves.

Run: ``python docs/experiments/attack_averaging.py [--victims 500 --max-n 64]``
Outputs: ``attack_averaging.csv``, ``attack_averaging.md``, ``docs/figures/attack_averaging.png``.
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

from attack_setup import pii_corpus  # noqa: E402


def _unit(Y):
    Y = np.asarray(Y, dtype=np.float64)
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


class Unit:
    """The fitted attack, run on the averages rescaled to unit length."""

    def __init__(self, attack) -> None:
        self.attack = attack

    def score(self, texts, embeddings, sensitive=None):
        return self.attack.score(texts, _unit(embeddings), sensitive=sensitive)


class TopK(Unit):
    """The same fitted attack, scored with "recovered" = among the top-k tokens."""

    def __init__(self, attack, k: int) -> None:
        super().__init__(attack)
        self.k = k

    def score(self, texts, embeddings, sensitive=None):
        self.attack.top_k = self.k
        try:
            return super().score(texts, embeddings, sensitive=sensitive)
        finally:
            self.attack.top_k = None


def markdown(rows: list[dict], top_k: int) -> str:
    """Rows = (mechanism, ε, randomness); columns = N; cells = cosine / top-k leakage."""
    ns = sorted({r["n_releases"] for r in rows if r["mechanism"] != "none"})
    out = []
    for key, title in (
        ("mean_cosine", "mean cosine of the average to the original"),
        ("expected_cosine", "predicted cosine (expected_average_cosine)"),
        (f"leakage_top{top_k}", f"token leakage of the average (top-{top_k})"),
        ("leakage", "token leakage of the average (p >= 0.5)"),
    ):
        out.append(f"{title}\n")
        out.append("| mechanism | ε | noise | " + " | ".join(f"N={n}" for n in ns) + " |")
        out.append("|" + "---|" * (3 + len(ns)))
        for m, e, rnd in dict.fromkeys(
            (r["mechanism"], r["epsilon"], r["randomness"])
            for r in rows
            if r["mechanism"] != "none"
        ):
            if key == "expected_cosine" and rnd == "keyed":
                continue
            by_n = {
                r["n_releases"]: r[key]
                for r in rows
                if (r["mechanism"], r["epsilon"], r["randomness"]) == (m, e, rnd)
            }
            cells = [f"{by_n[n]:.4f}" if isinstance(by_n.get(n), float) else "" for n in ns]
            out.append(f"| {m} | {e:g} | {rnd} | " + " | ".join(cells) + " |")
        base = next(r for r in rows if r["mechanism"] == "none")
        if key.startswith("leakage"):
            out.append(f"\nunprotected embeddings: {base[key]:.4f}")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--aux", type=int, default=1500)
    ap.add_argument("--victims", type=int, default=500)
    ap.add_argument("--max-n", type=int, default=64)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[20.0, 40.0])
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--mlc-epochs", type=int, default=40, help="[T26]: 20")
    ap.add_argument("--mlc-lr", type=float, default=3e-3, help="[T26]: 1e-4")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    import torch

    from privembed.attacks import MLCAttack, averaging_attack, release_stack
    from privembed.attacks.corpus import sensitive_tokens
    from privembed.mechanisms import LaplaceMechanism, PurkayasthaMechanism

    torch.set_num_threads(1)
    t0 = time.time()
    notes, X = pii_corpus(args.notes, 0)
    texts = [n.text for n in notes]
    sens = [sensitive_tokens(n) for n in notes]
    aux = np.arange(args.aux)
    vic = np.arange(args.aux, args.aux + args.victims)
    v_tx, v_sens, Xv = [texts[i] for i in vic], [sens[i] for i in vic], X[vic]
    atk = MLCAttack(epochs=args.mlc_epochs, lr=args.mlc_lr).fit(
        [texts[i] for i in aux], X[aux], rng=args.seed
    )
    atk_1 = Unit(atk)
    atk_k = TopK(atk, args.top_k)
    ids = [notes[i].id for i in vic]
    rows = []
    for mech in [LaplaceMechanism(epsilon=e) for e in args.epsilons] + [
        PurkayasthaMechanism(epsilon=e) for e in args.epsilons
    ]:
        stacks = {
            "fresh": release_stack(mech, Xv, args.max_n, rng=args.seed),
            "keyed": release_stack(mech, Xv, args.max_n, key=secrets.token_bytes(32), ids=ids),
        }
        for randomness, R in stacks.items():
            rep = averaging_attack(
                R, Xv, token_attack=atk_1, texts=v_tx, sensitive=v_sens, keyed=randomness == "keyed"
            )
            rep_k = averaging_attack(R, Xv, token_attack=atk_k, texts=v_tx, sensitive=v_sens)
            for i, n in enumerate(rep.n_releases):
                rows.append(
                    {
                        "mechanism": mech.name,
                        "epsilon": mech.epsilon,
                        "randomness": randomness,
                        "n_releases": n,
                        "mean_cosine": rep.mean_cosine[i],
                        "expected_cosine": rep.expected_cosine[i] if rep.expected_cosine else "",
                        "leakage": rep.leakage[i],
                        f"leakage_top{args.top_k}": rep_k.leakage[i],
                    }
                )
            print(
                f"{mech!r} {randomness}: cos {rep.mean_cosine[0]:.3f} -> {rep.mean_cosine[-1]:.3f}, "
                f"leak@top{args.top_k} {rep_k.leakage[0]:.3f} -> {rep_k.leakage[-1]:.3f}",
                flush=True,
            )
    base = atk.score(v_tx, Xv, sensitive=v_sens)
    base_k = atk_k.score(v_tx, Xv, sensitive=v_sens)
    rows.append(
        {
            "mechanism": "none",
            "epsilon": "",
            "randomness": "",
            "n_releases": 1,
            "mean_cosine": 1.0,
            "expected_cosine": "",
            "leakage": base.leakage,
            f"leakage_top{args.top_k}": base_k.leakage,
        }
    )
    with (args.out / "attack_averaging.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for m, e in dict.fromkeys(
        (r["mechanism"], r["epsilon"]) for r in rows if r["mechanism"] != "none"
    ):
        for randomness, ls in (("fresh", "-"), ("keyed", "--")):
            rs = [
                r
                for r in rows
                if (r["mechanism"], r["epsilon"], r["randomness"]) == (m, e, randomness)
            ]
            n = [r["n_releases"] for r in rs]
            lab = f"{m} eps={e:g} {randomness}"
            line = axes[0].plot(n, [r["mean_cosine"] for r in rs], ls, marker="o", label=lab)[0]
            if randomness == "fresh":
                axes[0].plot(n, [r["expected_cosine"] for r in rs], ":", color=line.get_color())
            axes[1].plot(n, [r[f"leakage_top{args.top_k}"] for r in rs], ls, marker="o", label=lab)
    axes[1].axhline(base_k.leakage, color="k", lw=1, label="unprotected")
    axes[1].axhline(base_k.leakage_chance, color="grey", ls=":", lw=1, label="blind guess")
    for ax, title in zip(
        axes,
        (
            "mean cosine of the average to the original (dotted: theory)",
            f"token leakage (top-{args.top_k})",
        ),
        strict=True,
    ):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("releases averaged (N)")
        ax.set_title(title)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    figs = FIGURES if args.out.resolve() == HERE else args.out
    figs.mkdir(exist_ok=True)
    fig.savefig(figs / "attack_averaging.png", dpi=120)
    (args.out / "attack_averaging.md").write_text(markdown(rows, args.top_k))
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
