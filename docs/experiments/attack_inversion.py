"""Sentence inversion (GEIA-style decoder trained here) on the PII corpus: leakage of the
reconstructed sentences ([T26] eq. 13), unprotected vs protected, adaptive attacker.

The decoder is a word-level GRU conditioned on the embedding (:class:`privembed.attacks.GEIAAttack`),
trained from scratch on the attacker's auxiliary notes (no pretrained language model is available
here). One seed: this is a demonstration of the attack, not a table of the papers.

Run: ``python docs/experiments/attack_inversion.py [--aux 1500 --victims 300 --epochs 20]``
The Mahalanobis mask floor is passed explicitly (``--mask-delta``, default 1e-2: the new
library default).

Outputs: ``attack_inversion.csv``, ``attack_inversion.md`` and ``attack_inversion_examples.txt``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from attack_setup import pii_corpus, profile_path  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--aux", type=int, default=1500)
    ap.add_argument("--victims", type=int, default=300)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[40.0, 160.0])
    ap.add_argument("--mask-lr", type=float, default=1e-2)
    ap.add_argument("--mask-delta", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    import torch

    from privembed.attacks import GEIAAttack
    from privembed.attacks.corpus import sensitive_tokens
    from privembed.concepts import ConceptProfile
    from privembed.mechanisms import LaplaceMechanism, MahalanobisMechanism, PurkayasthaMechanism

    torch.set_num_threads(1)
    t0 = time.time()
    notes, X = pii_corpus(args.notes, 0)
    texts = [n.text for n in notes]
    sens = [sensitive_tokens(n) for n in notes]
    aux = np.arange(args.aux)
    vic = np.arange(args.aux, args.aux + args.victims)
    a_tx, v_tx, v_sens = [texts[i] for i in aux], [texts[i] for i in vic], [sens[i] for i in vic]
    mask = ConceptProfile.load(profile_path("pii", args.mask_lr)).mask
    configs: list = [("none", None)]
    for e in args.epsilons:
        configs += [
            ("laplace", LaplaceMechanism(epsilon=e)),
            (
                f"mahalanobis (PII mask, lr {args.mask_lr:g}, delta {args.mask_delta:g})",
                MahalanobisMechanism(epsilon=e, mask=mask, mask_delta=args.mask_delta),
            ),
            ("purkayastha", PurkayasthaMechanism(epsilon=e)),
        ]
    rows, examples = [], []
    gen = np.random.default_rng(args.seed)
    for name, mech in configs:
        t1 = time.time()
        atk = GEIAAttack(epochs=args.epochs)
        if mech is None:
            atk.fit(a_tx, X[aux], rng=gen)
            Y = X[vic]
        else:
            atk.fit_adaptive(a_tx, X[aux], mech, rng=gen)
            Y = mech.privatize(X[vic], rng=gen)
        r = atk.score(v_tx, Y, sensitive=v_sens)
        rows.append(
            {
                "mechanism": name,
                "epsilon": "" if mech is None else mech.epsilon,
                "leakage": r.leakage,
                "leakage_blind": r.leakage_chance,
                "word_precision": r.precision,
                "word_recall": r.recall,
                "word_f1": r.f1,
                "exact_match": r.exact_match,
                "final_train_loss": atk.history_[-1],
            }
        )
        examples.append(f"== {name} eps={rows[-1]['epsilon']}")
        examples += [f"  {e['text']}\n  -> {e['reconstruction']}" for e in r.examples]
        print(
            f"{name:32s} eps={rows[-1]['epsilon']!s:6s} leakage={r.leakage:.3f} "
            f"(blind {r.leakage_chance:.3f}) F1={r.f1:.3f} ({time.time() - t1:.0f}s)",
            flush=True,
        )
    with (args.out / "attack_inversion.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    (args.out / "attack_inversion_examples.txt").write_text("\n".join(examples) + "\n")
    cols = list(rows[0])
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += [
        "| "
        + " | ".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols)
        + " |"
        for r in rows
    ]
    (args.out / "attack_inversion.md").write_text(
        f"GEIA-style GRU decoder, {args.aux} auxiliary notes, {args.victims} victims, "
        f"{args.epochs} epochs, seed {args.seed}\n\n" + "\n".join(md) + "\n"
    )
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
