"""Closed forms in ``privembed.core.theory``, cross-checked against independent computations.

* Gaussian calibration against Google's ``dp_accounting`` (its own analytic-Gaussian sigma
  search, its closed-form delta, and its privacy-loss-distribution accountant for one event).
* Expected cosines against nested adaptive quadrature (``scipy.integrate.quad``) over the
  exact radius and direction laws.
* The numbers quoted by [K26] and in the design notes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import accountant, common
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy import integrate, special, stats

from privembed.core import theory

from .mechanisms._laws import ExactAngleLaw

EPS_GRID = [1e-3, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 1e3, 1e4]
DELTA_GRID = [1e-5, 1e-10]

# --------------------------------------------------------------------------------------------
# Gaussian calibration
# --------------------------------------------------------------------------------------------


def _delta_direct(sigma: float, eps: float, sens: float) -> float:
    """[BW18] Thm 8 in linear space with scipy.stats (fine where delta is not tiny)."""
    a = sens / (2 * sigma)
    b = eps * sigma / sens
    return float(stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b))


@pytest.mark.parametrize("sens", [1.0, 2.0])
@pytest.mark.parametrize("delta", DELTA_GRID)
@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0, 20.0, 100.0, 1e3])
def test_analytic_sigma_matches_dp_accounting(eps: float, delta: float, sens: float) -> None:
    ours = theory.analytic_gaussian_sigma(eps, delta, sens)
    theirs = accountant.get_smallest_gaussian_noise(
        common.DifferentialPrivacyParameters(eps, delta), num_queries=1, sensitivity=sens
    )
    # dp_accounting bisects to absolute tolerance 1e-7 and returns a feasible sigma, so it is
    # at least the smallest sigma (ours) and at most 1e-7 above it
    assert ours * (1 - 1e-12) <= theirs <= ours + 1e-7, (ours, theirs)


@pytest.mark.parametrize("sigma", [0.05, 0.2, 0.5, 1.0, 2.0, 20.0])
@pytest.mark.parametrize("eps", [0.01, 0.1, 1.0, 5.0, 20.0, 100.0])
def test_analytic_delta_matches_dp_accounting_and_direct_formula(sigma: float, eps: float) -> None:
    ours = theory.analytic_gaussian_delta(sigma, eps, 2.0)
    theirs = plm.GaussianPrivacyLoss(sigma, sensitivity=2.0).get_delta_for_epsilon(eps)
    if theirs < 1e-10:  # linear-space evaluations lose relative accuracy below this
        assert ours < 1e-10
        return
    assert ours == pytest.approx(theirs, rel=1e-9)
    assert ours == pytest.approx(_delta_direct(sigma, eps, 2.0), rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-5), (5.0, 1e-5), (20.0, 1e-8)])
def test_analytic_sigma_against_privacy_loss_distribution(eps: float, delta: float) -> None:
    """One Gaussian event in dp_accounting's PLD accountant brackets the exact delta: the
    pessimistic (connect-the-dots) estimate is >= it, the optimistic one <= it."""
    sigma = theory.analytic_gaussian_sigma(eps, delta)
    upper = pld.from_gaussian_mechanism(
        sigma, sensitivity=2.0, value_discretization_interval=1e-3
    ).get_delta_for_epsilon(eps)
    lower = pld.from_gaussian_mechanism(
        sigma,
        sensitivity=2.0,
        value_discretization_interval=1e-3,
        pessimistic_estimate=False,
        use_connect_dots=False,
    ).get_delta_for_epsilon(eps)
    assert lower <= delta * (1 + 1e-9)
    assert upper >= delta * (1 - 1e-9)
    assert (upper - lower) / delta < 0.05  # the bracket is tight enough to mean something


@pytest.mark.parametrize("delta", [*DELTA_GRID, 1e-300])
@pytest.mark.parametrize("eps", EPS_GRID)
def test_analytic_sigma_is_the_smallest(eps: float, delta: float) -> None:
    sigma = theory.analytic_gaussian_sigma(eps, delta)
    log_delta = math.log(delta)
    assert theory.log_analytic_gaussian_delta(sigma, eps) <= log_delta
    smaller = sigma * (1 - 1e-9)
    assert theory.log_analytic_gaussian_delta(smaller, eps) > log_delta


@pytest.mark.parametrize("delta", [*DELTA_GRID, 1e-300])
def test_analytic_sigma_stable_and_monotone_up_to_1e4(delta: float) -> None:
    eps = np.logspace(-3, 4, 29)
    sig = np.array([theory.analytic_gaussian_sigma(float(e), delta) for e in eps])
    assert np.isfinite(sig).all() and (sig > 0).all()
    assert (np.diff(sig) < 0).all(), "sigma must decrease as epsilon grows"
    # the classic formula's 1/epsilon scaling bounds it for epsilon < 1 ...
    classic = np.array([theory.classic_gaussian_sigma(float(e), delta) for e in eps])
    assert (sig[eps < 1] <= classic[eps < 1]).all()


def test_analytic_sigma_grows_as_delta_shrinks() -> None:
    sig = [theory.analytic_gaussian_sigma(5.0, d) for d in (1e-2, 1e-5, 1e-10, 1e-100, 1e-300)]
    assert all(a < b for a, b in itertools.pairwise(sig))
    assert theory.analytic_gaussian_sigma(5.0, 1e-5, 1.0) == pytest.approx(sig[1] / 2, rel=1e-9)


def test_log_delta_finite_and_monotone_at_extreme_epsilon() -> None:
    eps = np.linspace(1e3, 1e4, 10)
    for sigma in (0.0146, 0.1, 0.2, 1.0):
        v = np.array([theory.log_analytic_gaussian_delta(sigma, float(e)) for e in eps])
        assert np.isfinite(v).all() and (v <= 0).all()
        # non-increasing; strictly where delta is not 1 to double precision (log delta = -0.0)
        assert (np.diff(v) <= 0).all(), "delta must not grow with epsilon"
        assert (np.diff(v)[v[1:] < -1e-300] < 0).all()
    # far below the float64 range: a = 1/sigma - eps sigma/2 = -995 at sigma = 0.2, eps = 1e4,
    # and log delta ~ log Phi(a) + log(1 - e^(-0.01)) = -495020.3 - 4.61 (Mills ratio)
    assert theory.log_analytic_gaussian_delta(0.2, 1e4) == pytest.approx(-495024.9, abs=0.1)


def test_k26_classic_sigma() -> None:
    # [K26]: sigma ~ 1.94 for epsilon = 5, delta = 1e-5, sensitivity 2
    s = theory.classic_gaussian_sigma(5.0, 1e-5, 2.0)
    assert abs(s - 1.94) < 0.005
    assert s == 2.0 * math.sqrt(2.0 * math.log(1.25 / 1e-5)) / 5.0


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 5.0, 8.0])
def test_classic_sigma_meets_requested_delta_below_10(eps: float) -> None:
    s = theory.classic_gaussian_sigma(eps, 1e-5)
    assert theory.analytic_gaussian_delta(s, eps) <= 1e-5


@pytest.mark.parametrize(
    ("eps", "true_delta"), [(10.0, 2.265e-5), (20.0, 1.527e-3), (50.0, 0.5862), (100.0, None)]
)
def test_classic_sigma_under_noises_from_epsilon_10(eps: float, true_delta: float | None) -> None:
    s = theory.classic_gaussian_sigma(eps, 1e-5)
    ours = theory.analytic_gaussian_delta(s, eps)
    theirs = plm.GaussianPrivacyLoss(s, sensitivity=2.0).get_delta_for_epsilon(eps)
    assert ours > 1e-5
    assert ours == pytest.approx(theirs, rel=1e-9)
    if true_delta is not None:
        assert ours == pytest.approx(true_delta, rel=1e-3)


@pytest.mark.slow
def test_empirical_sigma_implied_epsilon() -> None:
    # design notes: sigma = 0.2 on unit vectors (sensitivity 2) -> epsilon ~ 91.8 at 1e-5
    eps = theory.analytic_gaussian_epsilon(0.2, 1e-5)
    assert round(eps, 1) == 91.8
    # dp_accounting's pessimistic PLD epsilon is an upper bound that is tight here
    theirs = pld.from_gaussian_mechanism(
        0.2, sensitivity=2.0, value_discretization_interval=1e-3
    ).get_epsilon_for_delta(1e-5)
    assert eps <= theirs <= eps * (1 + 1e-6)
    # implied epsilon and calibration are inverse maps
    assert theory.analytic_gaussian_sigma(eps, 1e-5) == pytest.approx(0.2, rel=1e-9)


@pytest.mark.parametrize("sigma", [0.01, 0.5, 3.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-8])
def test_epsilon_and_sigma_round_trip(sigma: float, delta: float) -> None:
    eps = theory.analytic_gaussian_epsilon(sigma, delta)
    assert eps > 0
    assert theory.analytic_gaussian_delta(sigma, eps) == pytest.approx(delta, rel=1e-6)


def test_implied_epsilon_is_zero_when_noise_is_huge() -> None:
    # delta(0) = 2 Phi(1/sigma) - 1 ~ 0.0008 <= 0.5 already at epsilon = 0
    assert theory.analytic_gaussian_epsilon(1000.0, 0.5) == 0.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: theory.analytic_gaussian_sigma(0, 1e-5), "epsilon must be > 0, got epsilon=0."),
        (lambda: theory.analytic_gaussian_sigma(1, 1.0), "delta must be < 1, got delta=1."),
        (
            lambda: theory.classic_gaussian_sigma(1, 1e-5, -2),
            "sensitivity must be > 0, got sensitivity=-2.",
        ),
        (lambda: theory.analytic_gaussian_delta(0, 1.0), "sigma must be > 0, got sigma=0."),
        (lambda: theory.analytic_gaussian_epsilon(1, 0), "delta must be > 0, got delta=0."),
        (lambda: theory.expected_cosine_gaussian(0.2, 1), "d must be >= 2, got d=1."),
        (lambda: theory.laplace_noise_norm_mean(0, 3), "epsilon must be > 0, got epsilon=0."),
    ],
)
def test_parameter_errors(call, message: str) -> None:
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


# --------------------------------------------------------------------------------------------
# Expected cosines
# --------------------------------------------------------------------------------------------


def _cos_given_radius(R: float, d: int) -> float:
    """E_t[(1 + R t)/sqrt(1 + 2 R t + R^2)] with (t+1)/2 ~ Beta((d-1)/2, (d-1)/2), by quad.

    The Beta density is written out (log-space, with ``betaln``) to keep nested quadrature fast.
    """
    if d == 2:  # t = cos(phi), phi uniform on [0, pi]: smooth, no endpoint singularity
        val, _ = integrate.quad(
            lambda p: (
                (1 + R * math.cos(p)) / math.sqrt(max(1 + 2 * R * math.cos(p) + R * R, 1e-300))
            ),
            0.0,
            math.pi,
            epsabs=1e-13,
            epsrel=1e-11,
            limit=400,
        )
        return val / math.pi
    a = (d - 1) / 2.0
    log_norm = special.betaln(a, a)
    lo, hi = special.betaincinv(a, a, 1e-15), special.betaincinv(a, a, 1 - 1e-15)
    sd = math.sqrt(1.0 / d)

    def f(b: float) -> float:
        t = 2 * b - 1
        dens = math.exp((a - 1) * (math.log(b) + math.log1p(-b)) - log_norm)
        return (1 + R * t) / math.sqrt(max(1 + 2 * R * t + R * R, 1e-300)) * dens

    pts = [0.5 + k * sd / 2 for k in range(-8, 9) if lo < 0.5 + k * sd / 2 < hi]
    val, _ = integrate.quad(f, lo, hi, points=pts, epsabs=1e-13, epsrel=1e-11, limit=400)
    return val


def _cos_d3(R: float) -> float:
    """Closed form for d = 3 (t uniform on [-1, 1]): 1 - R^2/3 for R <= 1, else 2/(3R)."""
    return 1.0 - R * R / 3.0 if R <= 1.0 else 2.0 / (3.0 * R)


def _cos_radial(radius_law, d: int) -> float:
    """E over an exact radius law (scipy.stats frozen distribution) of the cosine given R."""
    inner = _cos_d3 if d == 3 else (lambda r: _cos_given_radius(r, d))
    lo, hi = radius_law.ppf(1e-14), radius_law.isf(1e-14)
    # the cosine given R has a kink at R = 1: integrate on either side of it
    cuts = [lo, *([1.0] if lo < 1.0 < hi else []), hi]
    return sum(
        integrate.quad(
            lambda r: inner(r) * radius_law.pdf(r), a, b, epsabs=1e-12, epsrel=1e-11, limit=200
        )[0]
        for a, b in itertools.pairwise(cuts)
    )


def test_cos_d3_closed_form_matches_quadrature() -> None:
    for R in (0.3, 1.0, 2.5):
        assert _cos_d3(R) == pytest.approx(_cos_given_radius(R, 3), abs=1e-10)


@pytest.mark.parametrize("d", [2, 3, 30, 60, 61, 384, 1920])
@pytest.mark.parametrize("R", [0.1, 0.9, 5.0])
def test_expected_cosine_radial_both_quadrature_branches(d: int, R: float) -> None:
    # d <= 60 uses Gauss-Jacobi nodes, d > 60 a grid on the exact density
    got = theory.expected_cosine_radial(np.array([R]), np.array([1.0]), d)
    assert got == pytest.approx(_cos_given_radius(R, d), abs=1e-9)


@pytest.mark.parametrize("sigma", [0.05, 0.5, 0.577, 1.0, 3.0])
def test_expected_cosine_gaussian_d3_against_closed_form(sigma: float) -> None:
    # |Z| = sigma * chi_3; the cosine given |Z| in closed form. Docstring accuracy: ~1e-8.
    ref = _cos_radial(stats.chi(3, scale=sigma), 3)
    assert theory.expected_cosine_gaussian(sigma, 3) == pytest.approx(ref, abs=1e-8)


@pytest.mark.parametrize("eps", [0.5, 3.0, 30.0])
def test_expected_cosine_laplace_d3_against_closed_form(eps: float) -> None:
    ref = _cos_radial(stats.gamma(3, scale=1.0 / eps), 3)
    assert theory.expected_cosine_laplace(eps, 3) == pytest.approx(ref, abs=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize(("sigma", "d"), [(0.3, 2), (0.3, 10), (0.2, 384), (3.0, 2)])
def test_expected_cosine_gaussian_against_quadrature(sigma: float, d: int) -> None:
    ref = _cos_radial(stats.chi(d, scale=sigma), d)
    assert theory.expected_cosine_gaussian(sigma, d) == pytest.approx(ref, abs=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize(("eps", "d"), [(2.0, 2), (20.0, 16), (500.0, 384)])
def test_expected_cosine_laplace_against_quadrature(eps: float, d: int) -> None:
    ref = _cos_radial(stats.gamma(d, scale=1.0 / eps), d)
    assert theory.expected_cosine_laplace(eps, d) == pytest.approx(ref, abs=1e-8)


@pytest.mark.slow
def test_expected_cosine_gaussian_limits() -> None:
    assert theory.expected_cosine_gaussian(0.0, 384) == 1.0
    # [K26] closed form: 0.1134 at sigma = 0.2, d = 1920; the exact value agrees to 1e-3
    assert round(theory.expected_cosine_gaussian_approx(0.2, 1920), 4) == 0.1134
    exact = theory.expected_cosine_gaussian(0.2, 1920)
    assert round(exact, 3) == 0.113
    assert abs(exact - theory.expected_cosine_gaussian_approx(0.2, 1920)) < 1e-3
    vals = [theory.expected_cosine_gaussian(s, 384) for s in (0.01, 0.05, 0.2, 1.0)]
    assert all(a > b for a, b in itertools.pairwise(vals))


@pytest.mark.slow
def test_expected_cosine_laplace_monotone_in_epsilon() -> None:
    vals = [theory.expected_cosine_laplace(e, 384) for e in (10.0, 100.0, 1e3, 1e4)]
    assert all(0 < a < b < 1 for a, b in itertools.pairwise(vals))


@pytest.mark.parametrize(
    ("eps", "d"),
    [(1.0, 2), (50.0, 2), (0.5, 3), (10.0, 3), (1e4, 3), (2.0, 5), (10.0, 384), (1e4, 384)],
)
def test_expected_cosine_purkayastha_against_quadrature(eps: float, d: int) -> None:
    ref = ExactAngleLaw(eps, d).mean_cos()
    assert theory.expected_cosine_purkayastha(eps, d) == pytest.approx(ref, abs=1e-9)


def test_expected_cosine_purkayastha_uniform_limit() -> None:
    assert abs(theory.expected_cosine_purkayastha(0.0, 3)) < 1e-12
    assert abs(theory.expected_cosine_purkayastha(0.0, 384)) < 1e-12


def test_laplace_noise_norm_mean() -> None:
    assert theory.laplace_noise_norm_mean(10.0, 384) == 38.4
    assert theory.laplace_noise_norm_mean(0.5, 3) == 6.0
