"""Text-level baselines ([T26] App. F.3, Table 9) on the demo corpus, beside a `privembed evaluate` run.

The corpus is the demo's: ``synthetic_clinical_notes(n, seed=0)`` (names, ages, cities, diseases,
symptoms, drugs, months, weekdays), embedded with all-MiniLM-L6-v2. The attacker/target split is
the one ``privembed evaluate --texts`` makes (``--seed 0``, ``--aux-fraction 0.5``), and the MLC
attack uses the same settings as that run (40 epochs, lr 3e-3), so the baselines' leakage and the
mechanisms' leakage in the report's ``results.csv`` are measured the same way: the attacker trains
on its own auxiliary notes treated like the targets (sanitised texts / protected embeddings).

Baselines: PII removal (spaCy NER + pattern recognisers), random replacement, same-type semantic
replacement. The trade-off rate R = (L0 - L) / (U0 - U) ([T26]) is computed on the mean cosine to
the original embedding, for the baselines and for every mechanism row of the report, with L0 the
leakage of the same attack on the plain embeddings.

Run (after the `privembed evaluate` run whose report folder is given):

    python docs/reproductions/eval_demo_baselines.py --n 1000 --report /path/to/report [...]

Writes eval_demo_baselines.csv (baselines) and eval_demo_tradeoff.csv (mechanisms with R) next to
this file and prints both as Markdown.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, embed_cached, markdown

ATTACK: dict[str, Any] = {"epochs": 40, "lr": 3e-3}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--aux-fraction", type=float, default=0.5)
    ap.add_argument(
        "--report", type=Path, nargs="*", default=[], help="privembed evaluate output folders"
    )
    args = ap.parse_args()

    from privembed.attacks import sensitive_tokens
    from privembed.core.rng import as_generator
    from privembed.data.datasets import synthetic_clinical_notes
    from privembed.evaluation.baselines import evaluate_text_baselines, tradeoff_rate

    notes = synthetic_clinical_notes(args.n, seed=0)
    texts = [n.text for n in notes]
    sens = [set(sensitive_tokens(n)) for n in notes]
    order = as_generator(args.seed).permutation(args.n)
    n_aux = round(args.aux_fraction * args.n)
    aux, tgt = np.sort(order[:n_aux]), np.sort(order[n_aux:])
    X = embed_cached("demo_notes", texts)
    t0 = time.time()

    def embed(ts: list[str]) -> np.ndarray:
        return embed_cached("demo_sanitised", ts)

    rows = evaluate_text_baselines(
        [texts[i] for i in tgt],
        embed=embed,
        sensitive=[sens[i] for i in tgt],
        aux_texts=[texts[i] for i in aux],
        X=X[tgt],
        aux_X=X[aux],
        utility_metric="mean_cosine",
        attack=ATTACK,
        seed=args.seed,
    )
    print(f"[demo baselines] {time.time() - t0:.0f}s")
    _csv(HERE / "eval_demo_baselines.csv", rows)
    cols = ["method", "pii_spans_per_text", "leakage", "leakage_chance", "auc_sensitive",
            "mean_cosine", "top1_protected", "delta_leakage", "delta_utility", "R"]  # fmt: skip
    print(markdown(rows, cols))
    if not args.report:
        return
    leak0 = rows[0]["leakage"]
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for rep in args.report:
        for r in _rows(rep / "results.csv"):
            d = by.setdefault(
                (rep.name, r["label"]),
                {"report": rep.name, "configuration": r["label"], "mechanism": r["mechanism"],
                 "epsilon": float(r["epsilon"]), "guarantee": r["guarantee"],
                 "runs": int(r["n_runs"])},
            )  # fmt: skip
            if r["metric"] in ("leakage", "mean_cosine", "top1_originals", "auc_sensitive"):
                d[r["metric"]] = float(r["mean"])
                d[r["metric"] + "_std"] = float(r["std"]) if r["std"] else 0.0
    mech_rows = list(by.values())
    for d in mech_rows:
        d["R"] = tradeoff_rate(leak0, 1.0, d["leakage"], d["mean_cosine"])
    _csv(HERE / "eval_demo_tradeoff.csv", mech_rows)
    print()
    print(markdown(mech_rows, ["report", "configuration", "guarantee", "runs", "mean_cosine",
                               "top1_originals", "leakage", "auc_sensitive", "R"]))  # fmt: skip


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _csv(path: Path, rows: list[dict[str, Any]]) -> None:
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(keys))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


if __name__ == "__main__":
    main()
