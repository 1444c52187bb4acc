"""Gaussian and empirical-Gaussian mechanisms: noise law, expected cosine, guarantees.

Statistical criteria (see ``_laws``): goodness of fit passes at p > 1e-3; moments within
4.4 standard errors. Seeds are fixed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privembed import ApproxDP, EmpiricalGaussianMechanism, GaussianMechanism
from privembed.core import theory

from ._laws import K_SE, P_MIN, assert_mean_within, ks_pvalue, unit_rows

MECHS = {
    "analytic": lambda **kw: GaussianMechanism(epsilon=5.0, delta=1e-5, **kw),
    "classic": lambda **kw: GaussianMechanism(epsilon=5.0, delta=1e-5, calibration="classic", **kw),
    "empirical": lambda **kw: EmpiricalGaussianMechanism(sigma=0.2, **kw),
}


@pytest.mark.parametrize("kind", sorted(MECHS))
def test_noise_is_iid_normal_with_sigma(kind: str) -> None:
    m = MECHS[kind](renormalize=False)
    n, d = 2000, 64
    X = unit_rows(np.random.default_rng(1), n, d)
    Z = (m.privatize(X, rng=2) - X) / m.sigma
    # pooled: sum of squares of n*d standardized draws ~ chi2(n*d); two-sided p > 1e-3
    q = float(np.sum(Z**2))
    p_pooled = 2 * min(stats.chi2.cdf(q, n * d), stats.chi2.sf(q, n * d))
    assert p_pooled > P_MIN, p_pooled
    # per coordinate: chi2(n) each, two-sided, Bonferroni over the d coordinates: p*d > 1e-3
    qj = np.sum(Z**2, axis=0)
    pj = 2 * np.minimum(stats.chi2.cdf(qj, n), stats.chi2.sf(qj, n))
    assert pj.min() * d > P_MIN, pj.min()
    # per-coordinate means: each N(0, 1/n) exactly; within 4.4 SE
    assert np.abs(Z.mean(axis=0)).max() * math.sqrt(n) < K_SE
    # shape of the law: KS of the pooled standardized noise against N(0, 1), p > 1e-3
    assert ks_pvalue(stats.norm.cdf(Z[:, :8].ravel())) > P_MIN


def test_noise_norm_matches_expected_noise_norm() -> None:
    m = GaussianMechanism(epsilon=2.0, delta=1e-6, renormalize=False)
    n, d = 4000, 384
    X = unit_rows(np.random.default_rng(3), n, d)
    r = np.linalg.norm(m.privatize(X, rng=4) - X, axis=1)
    # |Z| / sigma ~ chi(d): exact sd = sigma * sqrt(d - E[chi]^2)
    mean = m.expected_noise_norm(d)
    sd = m.sigma * math.sqrt(d - (mean / m.sigma) ** 2)
    assert_mean_within(r, mean, sd=sd, what="E|Z|")
    assert ks_pvalue(stats.chi.cdf(r / m.sigma, d)) > P_MIN


@pytest.mark.parametrize(
    ("mech", "d"),
    [
        pytest.param(  # the [K26] setting
            EmpiricalGaussianMechanism(sigma=0.2, renormalize=False), 1920, marks=pytest.mark.slow
        ),
        (GaussianMechanism(epsilon=50.0, delta=1e-5, renormalize=False), 384),
        (GaussianMechanism(epsilon=200.0, delta=1e-5, renormalize=False), 16),
    ],
    ids=["K26-sigma0.2-d1920", "eps50-d384", "eps200-d16"],
)
def test_mean_cosine_matches_expected_cosine(mech, d: int) -> None:
    n = 4000
    X = unit_rows(np.random.default_rng(5), n, d)
    Y_raw = mech.privatize(X, rng=6)
    cos_raw = np.einsum("ij,ij->i", X, Y_raw) / np.linalg.norm(Y_raw, axis=1)
    # renormalising is post-processing: same noise (same seed), same cosines
    cfg = {k: v for k, v in mech.config.items() if k != "mechanism"}
    renorm = type(mech)(**{**cfg, "renormalize": True})
    Y_unit = renorm.privatize(X, rng=6)
    np.testing.assert_allclose(np.linalg.norm(Y_unit, axis=1), 1.0, atol=1e-12)
    cos_unit = np.einsum("ij,ij->i", X, Y_unit)
    np.testing.assert_allclose(cos_unit, cos_raw, rtol=0, atol=1e-12)
    # mean cosine within 4.4 standard errors (sample sd) of the exact expectation
    assert_mean_within(cos_unit, mech.expected_cosine(d), what="mean cosine")


def test_k26_expected_cosine_numbers() -> None:
    m = EmpiricalGaussianMechanism(sigma=0.2)
    # [K26] §2: E[cos] ~ 1/sqrt(1 + d sigma^2) = 0.1134 at d = 1920
    assert round(m.expected_cosine(1920, exact=False), 3) == 0.113
    assert round(m.expected_cosine(1920), 3) == 0.113
    # the closed form is the large-d limit: within 1e-3 of the exact value here
    assert abs(m.expected_cosine(1920) - m.expected_cosine(1920, exact=False)) < 1e-3


def test_clip_keeps_short_inputs_and_shortens_long_ones() -> None:
    m = GaussianMechanism(epsilon=2.0, delta=1e-5, input_norm="clip", renormalize=False)
    n, d = 3000, 8
    short = np.full(d, 0.5 / math.sqrt(d))  # norm 0.5: kept as is
    long = np.full(d, 3.0 / math.sqrt(d))  # norm 3: clipped to norm 1
    for x, centre in ((short, short), (long, long / 3.0)):
        Y = m.privatize(np.tile(x, (n, 1)), rng=7)
        # each coordinate mean ~ N(centre, sigma^2/n); all within 4.4 SE
        z = (Y.mean(axis=0) - centre) / (m.sigma / math.sqrt(n))
        assert np.abs(z).max() < K_SE, z


def test_normalize_scales_inputs_to_unit_length() -> None:
    m = GaussianMechanism(epsilon=2.0, delta=1e-5, renormalize=False)
    n, d = 3000, 8
    x = np.arange(1.0, d + 1)
    Y = m.privatize(np.tile(x, (n, 1)), rng=8)
    z = (Y.mean(axis=0) - x / np.linalg.norm(x)) / (m.sigma / math.sqrt(n))
    assert np.abs(z).max() < K_SE, z


def test_sigma_calibrations() -> None:
    a = GaussianMechanism(epsilon=5.0, delta=1e-5)
    c = GaussianMechanism(epsilon=5.0, delta=1e-5, calibration="classic")
    assert a.sigma == theory.analytic_gaussian_sigma(5.0, 1e-5, 2.0)
    assert c.sigma == theory.classic_gaussian_sigma(5.0, 1e-5, 2.0)
    assert abs(c.sigma - 1.94) < 0.005  # [K26]
    assert a.sigma < c.sigma
    assert a.noise_scale == a.sigma and a.variance == a.sigma**2
    s1 = GaussianMechanism(epsilon=5.0, delta=1e-5, sensitivity=1.0).sigma
    assert math.isclose(s1, a.sigma / 2, rel_tol=1e-9)  # sigma is linear in the sensitivity


def test_analytic_guarantee_is_exact() -> None:
    m = GaussianMechanism(epsilon=5.0, delta=1e-5)
    g = m.guarantee
    assert isinstance(g, ApproxDP)
    assert (g.epsilon, g.delta) == (5.0, 1e-5)
    assert "unit vectors" in g.neighbouring
    assert m.achieved_delta <= 1e-5


def test_classic_guarantee_below_epsilon_10_keeps_requested_delta() -> None:
    m = GaussianMechanism(epsilon=5.0, delta=1e-5, calibration="classic")
    assert m.achieved_delta < 1e-5
    assert (m.guarantee.epsilon, m.guarantee.delta) == (5.0, 1e-5)


@pytest.mark.parametrize(("epsilon", "true_delta"), [(10.0, 2.265e-5), (50.0, 0.5862)])
def test_classic_guarantee_reports_the_true_delta(epsilon: float, true_delta: float) -> None:
    m = GaussianMechanism(epsilon=epsilon, delta=1e-5, calibration="classic")
    g = m.guarantee
    assert g.epsilon == epsilon
    assert g.delta > 1e-5, "the classic sigma under-noises for epsilon >= 10"
    assert g.delta == pytest.approx(true_delta, rel=1e-3)
    assert g.delta == m.achieved_delta
    assert "under-noises" in g.note
    eps_true = theory.analytic_gaussian_epsilon(m.sigma, 1e-5)
    assert eps_true > epsilon
    assert f"{eps_true:.4g}" in g.note


def test_classic_guarantee_delta_is_capped_at_one() -> None:
    g = GaussianMechanism(epsilon=1000.0, delta=1e-5, calibration="classic").guarantee
    assert g.delta <= 1.0
    assert g.delta > 0.999


def test_empirical_guarantee_reports_implied_epsilon() -> None:
    m = EmpiricalGaussianMechanism(sigma=0.2)
    g = m.guarantee
    assert isinstance(g, ApproxDP)
    assert g.delta == 1e-5
    assert abs(g.epsilon - 91.8) < 0.05  # [K26] sigma_emp = 0.2 gives no meaningful protection
    stricter = EmpiricalGaussianMechanism(sigma=0.2, report_delta=1e-8).guarantee
    assert stricter.epsilon > g.epsilon
    # implied epsilon and calibration are inverse to each other
    assert math.isclose(theory.analytic_gaussian_sigma(g.epsilon, g.delta), 0.2, rel_tol=1e-8)
