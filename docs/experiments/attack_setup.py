"""Shared inputs of the attack experiments: five learned concept masks and embedded corpora.

Everything is cached under ``artifacts/attacks/`` (git-ignored) and embeddings under the
concept-embedding cache (``$PRIVEMBED_CACHE_DIR`` or ``~/.cache/privembed/embeddings``), so the
experiment scripts can be rerun without embedding anything again.

* five concept profiles for [F26] Table 1 -- weekdays, months, countries, gender terms, city
  names -- learned with :func:`privembed.concepts.learn_profile` (hard-concrete masks, [T26]
  Alg. 2) on all-MiniLM-L6-v2, from seeded generated sentences;
* a document pool for the fingerprint groups (generated sentences of all five concepts, mixed);
* a PII corpus (templates + Faker: :func:`privembed.data.datasets.synthetic_clinical_notes`) with its
  embeddings, for the token-leakage table, and a combined "PII" profile (person, city, disease,
  symptom, drug) for the Mahalanobis row of that table.

Run: ``python docs/experiments/attack_setup.py [--sentences 1000] [--pool 1200] [--notes 3000]``
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
ART = ROOT / "artifacts" / "attacks"

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
#: [F26]'s five concepts, in table order
F26_CONCEPTS = ("weekday", "month", "country", "gender", "city")
#: concepts of the PII corpus that the combined Mahalanobis profile protects
PII_CONCEPTS = ("person", "city", "disease", "symptom", "drug")


def concept_and_sentences(name: str, n: int, seed: int) -> tuple[object, list[str]]:
    """The concept definition and ``n`` seeded sentences that contain it."""
    from privembed.concepts import Concept, builtin_concept, generate_sentences

    if name in ("weekday", "month"):
        words = WEEKDAYS if name == "weekday" else MONTHS
        concept = Concept(name=name, tokens=words, case_sensitive=True, description=f"{name}s")
        pat = re.compile(r"\b(?:" + "|".join(words) + r")\b")
        out: list[str] = []
        batch = 0
        while len(out) < n:
            for s in generate_sentences("date", 4 * n, rng=seed * 1000 + batch):
                if pat.search(s):
                    out.append(s)
            batch += 1
        return concept, out[:n]
    return builtin_concept(name), generate_sentences(name, n, rng=seed)


#: mask-learning rates: [T26] App. H.2's default, and a 100x larger one that gives sparse masks
MASK_LRS = (1e-4, 1e-2)


def profile_path(name: str, lr: float) -> Path:
    return ART / "profiles" / f"lr{lr:g}" / f"{name}.profile"


def learn_profiles(names: tuple[str, ...], n: int, seed: int, epochs: int, lr: float) -> None:
    from privembed.concepts import learn_profile

    for name in names:
        path = profile_path(name, lr)
        if path.exists():
            print(f"[setup] {name}: cached profile {path}", flush=True)
            continue
        t0 = time.time()
        concept, texts = concept_and_sentences(name, n, seed)
        profile = learn_profile(texts, concept, rng=seed, epochs=epochs, lr=lr)
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.save(path)
        s = profile.summary()
        print(
            f"[setup] {name} (lr {lr:g}): {s['n_selected']} of {s['dim']} dims selected, probe val acc "
            f"{s['val_accuracy_masked']} (unmasked {s['val_accuracy_unmasked']}), "
            f"{time.time() - t0:.0f}s",
            flush=True,
        )


def doc_pool(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``n`` mixed sentences (equal shares of the five concepts) and their embeddings."""
    from privembed.concepts import embed_texts

    texts: list[str] = []
    per = -(-n // len(F26_CONCEPTS))
    for i, name in enumerate(F26_CONCEPTS):
        _c, s = concept_and_sentences(name, per, seed + 7919 * (i + 1))
        texts.extend(s)
    rng = np.random.default_rng(seed)
    texts = [texts[i] for i in rng.permutation(len(texts))[:n]]
    return texts, np.asarray(embed_texts(texts), dtype=np.float64)


def pii_corpus(n: int, seed: int) -> tuple[list[object], np.ndarray]:
    """``n`` synthetic clinical notes (templates + Faker) and their embeddings."""
    from privembed.concepts import embed_texts
    from privembed.data.datasets import synthetic_clinical_notes

    notes = synthetic_clinical_notes(n, seed=seed)
    X = embed_texts([nt.text for nt in notes])
    return list(notes), np.asarray(X, dtype=np.float64)


def pii_profile(n: int, seed: int, epochs: int, lr: float) -> Path:
    """Combined (max rule) profile of the PII concepts, learned on generated sentences."""
    from privembed.concepts import ConceptProfile

    learn_profiles(PII_CONCEPTS, n, seed, epochs, lr)
    path = profile_path("pii", lr)
    if not path.exists():
        parts = [ConceptProfile.load(profile_path(c, lr)) for c in PII_CONCEPTS]
        ConceptProfile.combine(parts).save(path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sentences", type=int, default=1000, help="sentences per concept mask")
    ap.add_argument("--epochs", type=int, default=100, help="mask-learning epochs")
    ap.add_argument("--pool", type=int, default=1200, help="documents in each fingerprint pool")
    ap.add_argument("--notes", type=int, default=3000, help="PII notes for the leakage table")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    t0 = time.time()
    for lr in MASK_LRS:
        learn_profiles(F26_CONCEPTS, args.sentences, args.seed, args.epochs, lr)
    for which, s in (("attack", 101), ("reference", 202)):
        texts, _X = doc_pool(args.pool, args.seed + s)
        print(f"[setup] {which} pool: {len(texts)} docs embedded", flush=True)
    notes, _X = pii_corpus(args.notes, args.seed)
    print(f"[setup] PII corpus: {len(notes)} notes embedded", flush=True)
    summary = {}
    for lr in MASK_LRS:
        pii_profile(args.sentences, args.seed, args.epochs, lr)
        for name in (*F26_CONCEPTS, *PII_CONCEPTS, "pii"):
            m = np.load(profile_path(name, lr))["mask"]
            summary[f"{name}@lr{lr:g}"] = {
                "open": int((m > 0).sum()),
                "mean": round(float(m.mean()), 3),
            }
    print(f"[setup] done in {time.time() - t0:.0f}s: {json.dumps(summary)}", flush=True)


if __name__ == "__main__":
    main()
