"""Which token-attack settings beat the blind attacker on unprotected embeddings?

The measurement behind ``privembed.attacks.token_inference.AUDIT_SETTINGS`` (docs/evaluation.md,
"Attack strength"). Two corpora of 300 texts embedded with the offline all-MiniLM-L6-v2 model:
the demo's synthetic clinical notes and the PII template sentences. For each setting and seed
0, 1, 2 the attacker owns a random half of the records (``attacker_split``), trains on their
*unprotected* embeddings, and attacks the other half; the table gives leakage - the blind
attacker's leakage and its 95% paired bootstrap interval (``metrics.leakage_excess``).

    python docs/reproductions/attack_strength.py        # about 2 minutes on 2 cores
"""

from __future__ import annotations

import numpy as np

from privembed.attacks import MLCAttack, sensitive_tokens
from privembed.attacks.token_inference import AUDIT_SETTINGS, T26_SETTINGS
from privembed.data.datasets import synthetic_clinical_notes
from privembed.data.embedders import Embedder
from privembed.evaluation.loaders import pii_sentences
from privembed.evaluation.pipeline import attacker_split

SETTINGS = {
    "T26 (512-256-128, 20 ep, lr 1e-4, p>=0.5)": dict(T26_SETTINGS),
    "512-256-128, 40 ep, lr 3e-3, p>=0.5": {"hidden": (512, 256, 128), "epochs": 40, "lr": 3e-3},
    "512-256-128, 40 ep, lr 3e-3, top-10": {
        "hidden": (512, 256, 128), "epochs": 40, "lr": 3e-3, "top_k": 10,
    },
    "256, 40 ep, lr 3e-3, p>=0.5": {"hidden": (256,), "epochs": 40, "lr": 3e-3},
    "256, 80 ep, lr 1e-3, top-10": {"hidden": (256,), "epochs": 80, "lr": 1e-3, "top_k": 10},
    "AUDIT (256, 40 ep, lr 3e-3, top-10)": dict(AUDIT_SETTINGS),
}  # fmt: skip


def corpora():
    emb = Embedder()
    notes = synthetic_clinical_notes(300, seed=0)
    texts = [n.text for n in notes]
    yield "demo notes", texts, [set(sensitive_tokens(n)) for n in notes], emb.encode(texts)
    c = pii_sentences(300, seed=0)
    yield "PII sentences", list(c.texts), [set(s) for s in c.sensitive], emb.encode(list(c.texts))


def main() -> None:
    print("| corpus | setting | seed 0 | seed 1 | seed 2 | beats chance |")
    print("|---|---|---|---|---|---|")
    for name, texts, sens, X in corpora():
        X = np.asarray(X)
        for label, kw in SETTINGS.items():
            cells, wins = [], 0
            for seed in (0, 1, 2):
                aux, tgt = attacker_split(len(texts), 0.5, seed)
                atk = MLCAttack(**kw).fit([texts[i] for i in aux], X[aux], rng=seed)
                r = atk.score([texts[i] for i in tgt], X[tgt], sensitive=[sens[i] for i in tgt])
                ex = r.leakage - r.leakage_chance
                cells.append(
                    f"{ex:+.3f} [{r.leakage_excess_low:+.3f}, {r.leakage_excess_high:+.3f}]"
                )
                wins += r.beats_chance
            print(f"| {name} | {label} | " + " | ".join(cells) + f" | {wins} of 3 |", flush=True)


if __name__ == "__main__":
    main()
