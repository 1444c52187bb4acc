"""The MLC token-inference attack: beats chance on unprotected vectors, chance on independent ones."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import MLCAttack, TokenVocabulary, pii_corpus, word_tokens
from privembed.mechanisms import LaplaceMechanism

from .conftest import WORDS, bow_corpus

FAST: dict[str, Any] = {"hidden": (64,), "epochs": 15, "lr": 3e-3, "min_count": 1}


def _null_auc_bound(n_pos: int, n_neg: int, k: float = 4.4) -> float:
    """k standard errors of the AUC of an uninformative score (Mann-Whitney null variance)."""
    return k * np.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))


def test_vocabulary_build_order_and_encode():
    v = TokenVocabulary.build([{"b", "a"}, {"a"}, {"c", "b"}, {"a"}], min_count=2, max_size=5)
    assert v.tokens == ["a", "b"]  # most frequent first, ties alphabetical
    assert v.encode([{"b", "zz"}]).tolist() == [[0.0, 1.0]]
    with pytest.raises(DataError, match="empty"):
        TokenVocabulary.build([{"a"}], min_count=2)


def test_beats_chance_on_unprotected_embeddings(bow):
    texts, X = bow
    atk = MLCAttack(**FAST).fit(texts[:400], X[:400], rng=0)
    sens = [{t for t in s.split() if t in WORDS[:8]} for s in texts[400:]]
    r = atk.score(texts[400:], X[400:], sensitive=sens)
    assert r.auc_all > 0.95 and r.auc_sensitive > 0.95
    assert r.leakage > 0.7 and r.leakage_chance < 0.4
    assert 0.5 < r.confidence <= 1.0
    assert r.vocabulary_size == len(WORDS) and r.rule == "p>=0.5"


def test_chance_when_embeddings_are_independent_of_texts(bow):
    """Vectors drawn independently of the texts carry no token information: AUC must be ~0.5."""
    texts, _X = bow
    Z = np.random.default_rng(7).standard_normal((600, 48))
    atk = MLCAttack(**FAST).fit(texts[:400], Z[:400], rng=0)
    r = atk.score(texts[400:], Z[400:])
    # each word is in 3/24 of 200 test texts: 25 positives, 175 negatives per token
    assert abs(r.auc_all - 0.5) < _null_auc_bound(25, 175)


def test_adaptive_attacker_sees_the_mechanism_and_loses_under_heavy_noise(bow):
    texts, X = bow
    mech = LaplaceMechanism(epsilon=2.0)  # noise norm ~ d / epsilon = 24 >> 1
    a = MLCAttack(**FAST).fit_adaptive(texts[:400], X[:400], mech, n_copies=2, rng=1)
    r = a.score(texts[400:], mech.privatize(X[400:], rng=2))
    assert r.auc_all < 0.75


def test_top_k_rule_and_reproducibility(bow):
    texts, X = bow
    a = MLCAttack(**FAST, top_k=3).fit(texts[:300], X[:300], rng=5)
    b = MLCAttack(**FAST, top_k=3).fit(texts[:300], X[:300], rng=5)
    np.testing.assert_array_equal(a.predict_proba(X[300:]), b.predict_proba(X[300:]))
    assert all(len(s) == 3 for s in a.predict(X[300:310]))
    assert a.score(texts[300:], X[300:]).rule == "top-3"


def test_errors():
    atk = MLCAttack()
    with pytest.raises(RuntimeError, match="not fitted"):
        atk.predict_proba(np.ones((2, 4)))
    with pytest.raises(DataError, match="3 rows but texts has 2"):
        MLCAttack(**FAST).fit(["a b", "c"], np.ones((3, 4)), rng=0)
    with pytest.raises(ValueError, match="threshold must be < 1"):
        MLCAttack(threshold=1.0)
    with pytest.raises(TypeError, match="single string"):
        MLCAttack(**FAST).fit("a b c", np.ones((1, 4)))
    fitted = MLCAttack(**FAST).fit(["a b", "a c"], np.eye(2, 4) + 0.1, rng=0)
    with pytest.raises(DataError, match="dimension 5"):
        fitted.predict_proba(np.ones((1, 5)))


def test_pii_corpus_sensitive_tokens_occur_in_their_notes():
    c = pii_corpus(5, seed=3)
    assert len(c) == 5 and len(c.subset([0, 2])) == 2
    for t, s in zip(c.texts, c.sensitive, strict=True):
        assert s and s <= set(word_tokens(t))
        assert not (s & {"of", "the", "and"})


@pytest.mark.slow
def test_default_configuration_learns_on_unprotected_bow():
    """The [T26] defaults (512-256-128, lr 1e-4, 20 epochs, batch 64) beat chance too."""
    texts, X = bow_corpus(1500, seed=3)
    atk = MLCAttack(min_count=1).fit(texts[:1000], X[:1000], rng=0)
    r = atk.score(texts[1000:], X[1000:])
    assert r.auc_all > 0.9


def test_score_is_eq13_eq14_recomputed_by_hand_from_the_probabilities(bow):
    """Leakage, confidence and the blind baseline, recomputed with plain loops from
    predict_proba and the training texts (not through privembed.attacks.metrics)."""
    texts, X = bow
    atk = MLCAttack(**FAST).fit(texts[:300], X[:300], rng=3)
    test_texts, Xt = texts[300:360], X[300:360]
    # sensitive: the text's words among w0..w7, plus a token the attacker has never seen
    sens = [{t for t in s.split() if t in WORDS[:8]} | {"zz_oov"} for s in test_texts]
    P = atk.predict_proba(Xt)
    assert atk.vocabulary_ is not None
    vocab = atk.vocabulary_.tokens
    col = {t: j for j, t in enumerate(vocab)}
    n_sens = sum(len(s) for s in sens)
    # training frequency of every token (for the blind baseline), most frequent first
    freq = {t: sum(t in s.split() for s in texts[:300]) for t in vocab}
    by_freq = sorted(vocab, key=lambda t: (-freq[t], t))
    for rule in ({}, {"top_k": 4}):
        atk.top_k = rule.get("top_k")
        hits = blind_hits = 0
        conf = 0.0
        for i, s in enumerate(sens):
            if rule:
                rec = {vocab[j] for j in np.argsort(-P[i])[:4]}
            else:
                rec = {t for t in vocab if P[i, col[t]] >= 0.5}
            hits += len(s & rec)
            blind_hits += len(s & set(by_freq[: len(rec)]))
            conf += sum(P[i, col[t]] for t in s if t in col)  # out of vocabulary: 0
        r = atk.score(test_texts, Xt, sensitive=sens)
        assert r.leakage == pytest.approx(hits / n_sens, abs=1e-12)
        assert r.leakage_chance == pytest.approx(blind_hits / n_sens, abs=1e-12)
        assert r.confidence == pytest.approx(conf / n_sens, rel=1e-9)
        assert r.n_sensitive == n_sens and r.sensitive_in_vocabulary == n_sens - len(sens)
    assert r.rule == "top-4"


def test_constant_dimensions_do_not_amplify_perturbations(bow):
    """A column that is constant up to rounding (all-MiniLM-L6-v2 has some) keeps scale 1: an
    attacker trained on clean vectors must still read vectors perturbed by 1e-4 (before the fix
    its z-score divided by the 1e-12 residue and the predictions collapsed to chance)."""
    texts, X = bow
    rng = np.random.default_rng(4)
    Xc = np.hstack([X, 0.1 + 1e-12 * rng.standard_normal((len(X), 1))])
    atk = MLCAttack(**FAST).fit(texts[:400], Xc[:400], rng=0)
    Y = Xc[400:] + 1e-4 * rng.standard_normal(Xc[400:].shape)
    assert atk.score(texts[400:], Y).auc_all > 0.95


def test_training_reports_every_epoch_and_progress_changes_nothing(bow):
    texts, X = bow
    done: list[int] = []
    a = MLCAttack(**FAST).fit(texts[:200], X[:200], rng=4, on_epoch=done.append)
    assert done == list(range(1, FAST["epochs"] + 1)) == list(range(1, len(a.history_) + 1))
    b = MLCAttack(**FAST).fit(texts[:200], X[:200], rng=4)
    np.testing.assert_array_equal(a.predict_proba(X[200:]), b.predict_proba(X[200:]))
    adaptive: list[int] = []
    MLCAttack(**FAST).fit_adaptive(
        texts[:100], X[:100], LaplaceMechanism(epsilon=50.0), rng=1, on_epoch=adaptive.append
    )
    assert adaptive == list(range(1, FAST["epochs"] + 1))
