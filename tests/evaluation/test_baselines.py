"""Text-level baselines: span detection, the three sanitisers, R, and the evaluation loop."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from privembed.evaluation.baselines import (
    detect_entities,
    evaluate_text_baselines,
    random_replacement,
    remove_spans,
    semantic_replacement,
    tradeoff_rate,
)

TEXTS = [
    "Ann Lee flew to Paris; mail ann.lee@example.com or call (555) 123-4567.",
    "Card 4111 1111 1111 1111 and IP 10.0.0.1 were used in Paris.",
]


class _Ent:
    def __init__(self, start, end, label):
        self.start_char, self.end_char, self.label_ = start, end, label


class _Doc:
    def __init__(self, ents):
        self.ents = ents


class PhraseNER:
    """A stand-in for a spaCy pipeline (``pipe`` -> docs with ``ents``): exact phrase matches.

    Keeps these tests free of spaCy's import and model load; the real model is used by
    ``detect_entities`` by default and in docs/reproductions/t26_table1.py.
    """

    def __init__(self, phrases):
        self.phrases = dict(phrases)

    def add(self, phrases):
        self.phrases.update(phrases)

    def pipe(self, texts):
        for t in texts:
            ents = []
            for phrase, label in self.phrases.items():
                start = t.find(phrase)
                while start >= 0:
                    ents.append(_Ent(start, start + len(phrase), label))
                    start = t.find(phrase, start + len(phrase))
            yield _Doc(sorted(ents, key=lambda e: e.start_char))


@pytest.fixture
def nlp():
    return PhraseNER({"Ann Lee": "PERSON", "Paris": "GPE", "first": "ORDINAL"})


def test_detection_combines_ner_and_patterns(nlp):
    spans = detect_entities([*TEXTS, "The first one."], nlp=nlp)
    got = [
        [(TEXTS[i][s:e] if i < 2 else "", lab) for s, e, lab in sp] for i, sp in enumerate(spans)
    ]
    assert got[0] == [
        ("Ann Lee", "PERSON"),
        ("Paris", "GPE"),
        ("ann.lee@example.com", "EMAIL_ADDRESS"),
        ("(555) 123-4567", "PHONE_NUMBER"),
    ]
    assert got[1] == [
        ("4111 1111 1111 1111", "CREDIT_CARD"),
        ("10.0.0.1", "IP_ADDRESS"),
        ("Paris", "GPE"),
    ]
    assert got[2] == []  # ORDINAL is not personal information


def test_sanitisers(nlp):
    spans = detect_entities(TEXTS, nlp=nlp)
    removed = remove_spans(TEXTS, spans)
    assert removed == ["flew to; mail or call.", "Card and IP were used in."]
    rnd = random_replacement(TEXTS, spans, rng=0)
    assert rnd == random_replacement(TEXTS, spans, rng=0)
    assert "Paris" not in " ".join(rnd) and "Ann" not in rnd[0]
    # as many words as the span had: 2 for "Ann Lee", 1 for "Paris", ...
    words_out = sum(len(t.split()) for t in rnd)
    assert words_out == sum(len(t.split()) for t in TEXTS)
    sem = semantic_replacement(TEXTS, spans, seed=0)
    assert "Ann Lee" not in sem[0] and "@" in sem[0] and "ann.lee@example.com" not in sem[0]
    assert sem == semantic_replacement(TEXTS, spans, seed=0)


def test_tradeoff_rate():
    assert tradeoff_rate(0.8, 1.0, 0.2, 0.7) == pytest.approx(2.0)
    assert tradeoff_rate(0.8, 1.0, 0.4, 1.0) == math.inf
    assert math.isnan(tradeoff_rate(0.5, 1.0, 0.5, 1.0))
    assert tradeoff_rate(0.5, 1.0, 0.6, 0.9) == pytest.approx(-1.0)  # leaks more and costs utility


def _bow_embed(texts):
    """A transparent bag-of-words embedding: every word adds its own fixed random vector."""
    out = np.zeros((len(texts), 64))
    for i, t in enumerate(texts):
        for w in t.lower().replace(";", " ").replace(".", " ").split():
            seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:4], "big")
            out[i] += np.random.default_rng(seed).standard_normal(64)
        out[i] += 1e-3
    return out


@pytest.mark.slow
def test_evaluate_text_baselines_removal_cuts_leakage(nlp):
    from privembed.evaluation.loaders import pii_sentences

    corpus = pii_sentences(500, seed=0, templates=["{{first_name}} lives in {{city}} today."])
    names = {v for sp in corpus.entities for _, _, k, v in sp}
    nlp.add({v: "PERSON" for v in names})
    target, aux = corpus.subset(range(150)), corpus.subset(range(150, 500))
    rows = evaluate_text_baselines(
        target.texts,
        embed=_bow_embed,
        sensitive=target.sensitive,
        aux_texts=aux.texts,
        methods=("removal", "semantic"),
        nlp=nlp,
        attack={"hidden": (64,), "epochs": 15, "lr": 3e-3, "min_count": 2},
    )
    by = {r["method"]: r for r in rows}
    assert list(by) == ["none", "removal", "semantic"]
    assert by["none"]["leakage"] > by["removal"]["leakage"] + 0.1
    assert by["removal"]["top1_protected"] < by["none"]["top1_protected"]
    r = by["removal"]
    assert r["R"] == pytest.approx(r["delta_leakage"] / r["delta_utility"])
