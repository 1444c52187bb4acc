"""Averaging attack: fresh noise shrinks like 1/sqrt(N) (as predicted), keyed noise gains nothing."""

from __future__ import annotations

import numpy as np
import pytest

from privembed import DataError
from privembed.attacks import averaging_attack, expected_average_cosine, release_stack
from privembed.mechanisms import GaussianMechanism, LaplaceMechanism

KEY = b"k" * 32


def _originals(n=60, d=64, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


def test_expected_average_cosine_closed_form():
    assert expected_average_cosine(0.2, 0.96, 1) == pytest.approx(0.2)
    # N -> infinity: the orthogonal part vanishes
    assert expected_average_cosine(0.2, 0.96, 10**9) == pytest.approx(1.0, abs=1e-4)
    assert expected_average_cosine(0.2, 0.96, 24) == pytest.approx(0.2 / np.sqrt(0.04 + 0.04))


def test_fresh_noise_averages_out_as_predicted():
    X = _originals()
    R = release_stack(LaplaceMechanism(epsilon=10.0), X, 32, rng=1)
    rep = averaging_attack(R, X)
    assert rep.n_releases == [1, 2, 4, 8, 16, 32]
    assert all(b > a for a, b in zip(rep.mean_cosine, rep.mean_cosine[1:], strict=False))
    assert rep.gain > 0.3
    # the large-d prediction: per-record cosines have sd ~ 0.1 here; the mean of 60 is within
    # ~4.4 * 0.1 / sqrt(60) ~ 0.06 of its expectation, and the closed form is exact up to O(1/d)
    np.testing.assert_allclose(rep.mean_cosine, rep.expected_cosine, atol=0.06)


def test_keyed_noise_gain_is_exactly_zero():
    X = _originals()
    mech = GaussianMechanism(epsilon=1.0, delta=1e-5)
    R = release_stack(mech, X, 16, key=KEY, ids=[f"r{i}" for i in range(len(X))])
    assert all((R[i] == R[0]).all() for i in range(16))  # bit-identical re-releases
    rep = averaging_attack(R, X, keyed=True)
    # the mean of identical rows equals the row up to float rounding of the sum
    assert abs(rep.gain) < 1e-12
    np.testing.assert_allclose(rep.mean_cosine, rep.mean_cosine[0], rtol=0, atol=1e-12)
    assert rep.expected_cosine == []


def test_token_leakage_is_reported_per_n():
    class Fake:
        def score(self, texts, emb, sensitive=None):
            class R:
                leakage = float(np.mean(emb[:, 0] > 0))

            return R()

    X = np.abs(_originals(10, 8)) + 0.1
    R = release_stack(LaplaceMechanism(epsilon=50.0), X, 4, rng=0)
    rep = averaging_attack(R, X, n_releases=[1, 4], token_attack=Fake(), texts=["t"] * 10)
    assert len(rep.leakage) == 2 and rep.rows()[1]["n_releases"] == 4


def test_errors():
    X = _originals(4, 8)
    with pytest.raises(DataError, match="per release"):
        averaging_attack(np.zeros((2, 3, 8)) + 1, X)
    with pytest.raises(ValueError, match="n_releases must be <= 2"):
        averaging_attack(np.stack([X, X]), X, n_releases=[3])
    with pytest.raises(ValueError, match="texts"):
        averaging_attack(np.stack([X, X]), X, token_attack=object())


def test_token_leakage_grows_with_fresh_noise_and_stays_put_with_keyed_noise(bow):
    """The MLC on averages: fresh noise averages out (leakage rises towards the unprotected
    value), keyed re-releases are identical, so every N gives the N = 1 leakage."""
    from privembed.attacks import MLCAttack

    texts, X = bow
    atk = MLCAttack(hidden=(64,), epochs=15, lr=3e-3, min_count=1).fit(texts[:400], X[:400], rng=0)
    tx, Xv = texts[400:], X[400:]
    mech = LaplaceMechanism(epsilon=8.0)  # noise norm ~ 48 / 8 = 6 >> 1

    class Unit:  # the attacker rescales each average to unit length (its own post-processing)
        def score(self, texts, emb, sensitive=None):
            return atk.score(texts, emb / np.linalg.norm(emb, axis=1, keepdims=True))

    fresh = averaging_attack(
        release_stack(mech, Xv, 64, rng=3), Xv, n_releases=[1, 64], token_attack=Unit(), texts=tx
    )
    keyed = averaging_attack(
        release_stack(mech, Xv, 64, key=KEY, ids=list(range(len(Xv)))),
        Xv,
        n_releases=[1, 8, 64],
        token_attack=Unit(),
        texts=tx,
        keyed=True,
    )
    full = atk.score(tx, Xv).leakage
    assert fresh.leakage[1] > fresh.leakage[0] + 0.2 and fresh.leakage[1] <= full + 0.05
    assert keyed.leakage == [keyed.leakage[0]] * 3


def test_result_is_the_largest_n_against_a_single_release_with_a_paired_t_interval():
    from scipy.stats import ttest_rel

    from privembed.attacks.base import ScoredReport
    from privembed.search.geometry import unit_pairs

    X = _originals()
    R = release_stack(LaplaceMechanism(epsilon=10.0), X, 32, rng=1)
    rep = averaging_attack(R, X)
    assert isinstance(rep, ScoredReport)
    r = rep.result()
    assert (r.attack, r.statistic, r.value) == ("averaging", "cosine@32", rep.mean_cosine[-1])
    assert r.blind == rep.single_cosine and rep.n_records == 60
    assert (r.excess_low, r.excess_high) == rep.gain_interval

    # independently: per-record cosines, the baseline the mean over the 32 single releases, and
    # scipy's paired t interval of the difference
    def cos(A):
        U, V = unit_pairs(A, X)
        return np.sum(U * V, axis=1)

    single = np.mean([cos(Y) for Y in R], axis=0)
    averaged = cos(R.mean(axis=0))
    assert r.blind == pytest.approx(single.mean(), rel=1e-12)
    ci = ttest_rel(averaged, single).confidence_interval(0.95)
    assert (r.excess_low, r.excess_high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    # one release's cosine, whichever release: its N = 1 row is within 4.4 standard errors
    # (per-record sd ~ 0.1 over 60 records)
    assert r.blind == pytest.approx(rep.mean_cosine[0], abs=4.4 * 0.1 / np.sqrt(60))
    assert r.beats_blind and r.excess_low > 0.4
    assert rep.to_dict()["gain_interval"] == list(rep.gain_interval)


def test_result_baseline_is_a_single_release_not_the_no_vector_attacker_nor_the_first_row():
    """Fails if the score were measured against the wrong baseline: keyed releases give the
    attacker a cosine well above 0 (a no-vector baseline would call that a gain), and with no
    N = 1 row the baseline is still one release (not the smallest N's average)."""
    X = _originals()
    mech = LaplaceMechanism(epsilon=200.0)  # little noise: a single release is informative
    ids = [f"r{i}" for i in range(len(X))]
    keyed = averaging_attack(release_stack(mech, X, 16, key=KEY, ids=ids), X, keyed=True)
    r = keyed.result()
    assert r.value > 0.5 and r.blind > 0.5  # far above what an attacker without vectors gets
    assert abs(r.value - r.blind) < 1e-12 and r.excess_high - r.excess_low < 1e-12
    assert not r.beats_blind

    fresh = averaging_attack(release_stack(mech, X, 16, rng=2), X, n_releases=[4, 16])
    f = fresh.result()
    assert f.statistic == "cosine@16" and f.blind < fresh.mean_cosine[0] < f.value
    assert f.beats_blind


def test_result_of_one_record_has_the_whole_range_as_its_interval():
    X = _originals(1)
    rep = averaging_attack(release_stack(LaplaceMechanism(epsilon=10.0), X, 4, rng=0), X)
    r = rep.result()
    assert (r.excess_low, r.excess_high) == (-2.0, 2.0) and not r.beats_blind
