"""Attack metrics against values computed by hand on small fixtures (and sklearn where it applies)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import metrics


def test_leakage_hand_computed():
    # text 0: 3 sensitive tokens, 2 recovered ("paris", "flu"); "the" is recovered but not
    # sensitive; text 1: 1 sensitive, not recovered; text 2: no sensitive token at all
    S = [{"paris", "flu", "tom"}, {"aspirin"}, set()]
    R = [{"paris", "flu", "the"}, {"ibuprofen"}, {"x", "y"}]
    assert metrics.leakage(S, R) == pytest.approx(2 / 4)
    # recovering a token twice (sets) and order do not matter
    assert metrics.leakage([["a", "a", "b"]], [["b", "a"]]) == 1.0
    assert math.isnan(metrics.leakage([set()], [{"a"}]))
    with pytest.raises(DataError, match="2 texts but recovered has 1"):
        metrics.leakage([{"a"}, {"b"}], [{"a"}])


def test_confidence_hand_computed_out_of_vocabulary_is_zero():
    vocab = ["paris", "flu", "tom"]
    P = np.array([[0.8, 0.6, 0.1], [0.3, 0.2, 0.9]])
    S = [{"paris", "flu", "zzz"}, {"tom"}]  # "zzz" not in the vocabulary: probability 0
    assert metrics.confidence(S, P, vocab) == pytest.approx((0.8 + 0.6 + 0.0 + 0.9) / 4)
    with pytest.raises(DataError, match=r"shape \(2, V\)"):
        metrics.confidence(S, P[:1], vocab)


def test_auc_with_ties_matches_pair_counting():
    scores = [0.2, 0.5, 0.5, 0.5, 0.9, 0.1]
    labels = [0, 1, 0, 1, 1, 0]
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    by_hand = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
    assert by_hand == pytest.approx(8 / 9)  # 7 wins + 2 ties x 0.5 = 8 of 9 pairs
    assert metrics.auc(scores, labels) == pytest.approx(by_hand)
    assert metrics.auc([0.3] * 4, [0, 1, 0, 1]) == 0.5  # all tied: exactly chance
    assert math.isnan(metrics.auc([0.1, 0.2], [1, 1]))


def test_auc_agrees_with_sklearn():
    import sklearn.metrics as sk

    rng = np.random.default_rng(0)
    s = np.round(rng.random(300), 1)  # many ties
    y = rng.random(300) < 0.3
    assert metrics.auc(s, y) == pytest.approx(sk.roc_auc_score(y, s), abs=1e-12)


def test_per_token_auc_columns_and_degenerate_tokens():
    S = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.5], [0.7, 0.3, 0.5]])
    Y = np.array([[1, 0, 1], [0, 1, 1], [1, 0, 1]])
    out = metrics.per_token_auc(S, Y)
    assert out[:2].tolist() == [1.0, 1.0] and math.isnan(out[2])  # token 2 always present
    assert metrics.per_token_auc(S, Y, columns=[1]).tolist() == [1.0]


def test_set_f1_and_classification_scores():
    f = metrics.set_f1([{"a", "b", "c"}, {"d"}], [{"a", "x"}, {"d"}])
    assert f == {
        "precision": 2 / 3,
        "recall": 2 / 4,
        "f1": pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5)),
    }
    y = ["a", "a", "b", "c"]
    p = ["a", "b", "b", "b"]
    assert metrics.accuracy(y, p) == 0.5
    # F1(a) = 2/3, F1(b) = 2*1/(2+2+0) = 1/2, F1(c) = 0
    assert metrics.macro_f1(y, p) == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    assert metrics.chance_accuracy(y) == 0.5
    with pytest.raises(DataError):
        metrics.accuracy(["a"], ["a", "b"])


def test_per_token_auc_equals_sklearn_column_by_column():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(1)
    S = np.round(rng.random((120, 30)), 1)  # ties
    Y = rng.random((120, 30)) < 0.2
    Y[:, 0] = False  # never present: NaN
    got = metrics.per_token_auc(S, Y)
    assert math.isnan(got[0])
    for j in range(1, 30):
        assert got[j] == pytest.approx(roc_auc_score(Y[:, j], S[:, j]), abs=1e-12)
    assert metrics.per_token_auc(S, Y, columns=[3, 5]).tolist() == pytest.approx(got[[3, 5]])


def test_leakage_excess_interval_excludes_zero_only_for_a_real_gain():
    """Paired bootstrap over texts (2,000 resamples, seed 0). 200 texts with 4 sensitive tokens:
    an attacker recovering 2 of them where the blind one recovers 1 has excess 0.25, and the
    interval is [0.25, 0.25] (every text differs by exactly one token); an attacker equal to
    the blind one on every text has [0, 0]; one that trades a hit for a miss at random has an
    interval around 0."""
    S = [{"a", "b", "c", "d"}] * 200
    ex, lo, hi = metrics.leakage_excess(S, [{"a", "b"}] * 200, [{"a"}] * 200)
    assert (ex, lo, hi) == (0.25, 0.25, 0.25)
    assert metrics.leakage_excess(S, [{"a"}] * 200, [{"a"}] * 200) == (0.0, 0.0, 0.0)
    rng = np.random.default_rng(0)
    R = [{"a"} if rng.random() < 0.5 else {"z"} for _ in range(200)]
    B = [{"a"} if rng.random() < 0.5 else {"z"} for _ in range(200)]
    ex, lo, hi = metrics.leakage_excess(S, R, B)
    assert lo < 0 < hi and lo < ex < hi
    with pytest.raises(DataError, match="one entry per text"):
        metrics.leakage_excess(S, R[:3], B)
