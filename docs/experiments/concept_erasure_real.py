"""Concept erasure on real text: GCIDE definitions that mention a disease vs not.

The concept: the definition names a disease -- one of the built-in ``disease`` concept's names
(faker-healthcare-provider's 158 diseases) or the words disease(s) / malady(ies); a definition
is labelled 1 when one occurs in it (``privembed.concepts.erasure.concept_labels``). The texts
are all 195,768 GCIDE definition units (``gcide_retrieval``): the 1,410 that name a disease and
twice as many others (a fixed sample), embedded with all-MiniLM-L6-v2 (ONNX int8, cached).

Two erasers, one held-out check (linear and MLP probes, ROC AUC on held-out definitions; the
split keeps every definition of a headword on one side):

* **generated**: LEACE fitted on generated D+/D- sentence pairs (``concept learn --concept
  disease --eraser`` without a corpus: 2,000 generated sentences, seed 0), applied to the real
  definitions;
* **real, leace**: LEACE fitted on 70% of the labelled real definitions (``fit_checked``),
  checked on the other 30%;
* **real, iterative**: ``fit_iterative`` on the same 70% (probe directions removed from the
  released unit rows until an inner validation probe is near chance), checked likewise.

Rows are probed as released (unit length after erasure); the unnormalised linear AUC is the
diagnostic of renormalisation. Run (after ``subspace_data.py``)::

    nice -n 10 python docs/experiments/concept_erasure_real.py

Writes ``concept_erasure_real.csv``.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gcide_embed import embed_cached  # noqa: E402
from subspace_data import DEFAULT_CACHE, DEFAULT_DICTD, make_embedder  # noqa: E402

from privembed.concepts import build_pairs, builtin_concept, generate_sentences  # noqa: E402
from privembed.concepts.erasure import (  # noqa: E402
    ConceptEraser,
    _split,
    concept_labels,
    fit_checked,
    probe_aucs,
)
from privembed.concepts.sources import Concept  # noqa: E402
from privembed.evaluation.loaders import gcide_retrieval  # noqa: E402

NEG_PER_POS = 2
EXTRA = ("disease", "diseases", "malady", "maladies")


def main() -> None:
    task = gcide_retrieval(DEFAULT_DICTD, split="dev", max_queries=1)  # every definition
    texts, ids = task.doc_texts, task.doc_ids
    builtin = builtin_concept("disease")
    concept = Concept(name="disease", tokens=(*builtin.tokens, *EXTRA))
    y_all = concept_labels(texts, concept)
    pos = np.flatnonzero(y_all == 1)
    neg = np.flatnonzero(y_all == 0)
    rng = np.random.default_rng(0)
    neg = rng.choice(neg, size=min(neg.size, NEG_PER_POS * pos.size), replace=False)
    rows_idx = np.sort(np.r_[pos, neg])
    y = y_all[rows_idx]
    X = embed_cached([texts[i] for i in rows_idx], DEFAULT_CACHE, "erasure-definitions")
    X = X.astype(np.float64)
    heads = np.array([ids[i].split("#")[0].lower() for i in rows_idx])
    print(f"{pos.size} definitions mention a disease; sample {len(rows_idx)} rows", flush=True)
    out = []

    # the real-text eraser and its check (fit 70%, held out 30%, headwords kept together)
    for method in ("leace", "iterative"):
        eraser, check = fit_checked(
            X, y, groups=heads, rng=0, data="GCIDE definitions (real)", method=method
        )
        out.append({"eraser": f"real definitions, {method} (rank {eraser.rank})",
                    **check.to_dict()})  # fmt: skip
        print(out[-1], flush=True)

    # the generated-sentence eraser, checked on the same held-out definitions
    sentences = generate_sentences("disease", 2000, rng=0)
    pairs = build_pairs(sentences, builtin)
    emb = make_embedder()
    Xp = emb.encode(list(pairs.positives)).astype(np.float64)
    Xn = emb.encode(list(pairs.negatives)).astype(np.float64)
    gen = ConceptEraser.from_pairs(Xp, Xn)
    fit, held = _split(y, 0.3, heads, np.random.default_rng(0))
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    R = np.asarray(gen.transform(X, renormalize=False), dtype=np.float64)
    E = R / np.linalg.norm(R, axis=1, keepdims=True)
    lin_b, mlp_b = probe_aucs(U[fit], y[fit], U[held], y[held], rng=1)
    lin_a, mlp_a = probe_aucs(E[fit], y[fit], E[held], y[held], rng=1)
    lin_r, _ = probe_aucs(R[fit], y[fit], R[held], y[held], mlp=False, rng=1)
    out.append({
        "eraser": f"generated sentences ({len(pairs)} D+/D- pairs)",
        "linear_before": lin_b, "linear_after": lin_a, "mlp_before": mlp_b, "mlp_after": mlp_a,
        "n_fit": int(fit.size), "n_heldout": int(held.size),
        "positives": float(y[held].mean()), "data": "GCIDE definitions (real)",
        "linear_after_unnormalised": lin_r,
    })  # fmt: skip
    print(out[-1], flush=True)
    with (HERE / "concept_erasure_real.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(out[0]))
        w.writeheader()
        for r in out:
            w.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})


if __name__ == "__main__":
    main()
