"""The noisy dot product law against numerical integration and Monte Carlo.

Monte Carlo draws come from the shared Laplace sampler (``sample_dot``). Tolerances are
derived from the sample size: a moment estimate must lie within 5 standard errors (the standard
error from the exact higher moment), an empirical CDF within 5 * sqrt(F(1 - F)/N).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

import privembed.mechanisms.laplace as laplace_module
from privembed.text import dx_theory as T

K_SE = 5.0


@pytest.mark.parametrize("n", [3, 10, 50, 300])
def test_angular_pdf_integrates_to_one_and_gives_the_moments(n):
    total = integrate.quad(lambda b: float(T.angular_pdf(b, n)), -1, 1)[0]
    assert total == pytest.approx(1.0, abs=1e-9)
    for j in range(7):
        num = integrate.quad(lambda b, j=j: b**j * float(T.angular_pdf(b, n)), -1, 1)[0]
        assert T.angular_moment(j, n) == pytest.approx(num, abs=1e-10)
    assert T.angular_moment(2, n) == pytest.approx(1 / n, rel=1e-12)
    for b in (-0.9, -0.2, 0.0, 0.35):
        num = integrate.quad(lambda s: float(T.angular_pdf(s, n)), -1, b)[0]
        assert float(T.angular_cdf(b, n)) == pytest.approx(num, abs=1e-9)


def test_dot_moments_and_variance_closed_forms():
    n, eps = 50, 10.0
    assert T.dot_variance(n, eps) == pytest.approx((n + 1) / eps**2)
    assert T.dot_moment(2, n, eps) == pytest.approx(T.dot_variance(n, eps), rel=1e-12)
    assert T.dot_moment(3, n, eps) == 0.0
    # E[R^2] = n (n + 1) / eps^2 for Gamma(n, 1/eps)
    assert T.radius_moment(2, n, eps) == pytest.approx(n * (n + 1) / eps**2, rel=1e-12)


@pytest.mark.parametrize("n,eps,N", [(50, 10.0, 200_000), (300, 5.0, 40_000)])
def test_variance_and_fourth_moment_match_monte_carlo(n, eps, N):
    z = T.sample_dot(n, eps, N, rng=2024)
    m2, m4, m8 = (T.dot_moment(j, n, eps) for j in (2, 4, 8))
    # mean: sd sqrt(m2 / N); second moment: sd sqrt((m4 - m2^2) / N); fourth: sqrt((m8 - m4^2)/N)
    assert abs(z.mean()) < K_SE * math.sqrt(m2 / N)
    assert abs((z**2).mean() - m2) < K_SE * math.sqrt((m4 - m2**2) / N)
    assert abs((z**4).mean() - m4) < K_SE * math.sqrt((m8 - m4**2) / N)


@pytest.mark.parametrize("n,eps", [(2, 1.0), (3, 2.0), (50, 10.0), (300, 5.0), (1000, 1.0)])
def test_eq11_matches_the_gamma_difference_formula(n, eps):
    sd = math.sqrt(T.dot_variance(n, eps))
    z = np.array([-12.0, -6.0, -3.0, -1.0, -0.2, 0.0, 0.7, 2.5]) * sd
    a = T.dot_cdf(z, n, eps)
    b = T.dot_cdf(z, n, eps, method="gamma-difference", nodes=64)
    np.testing.assert_allclose(a, b, rtol=1e-7, atol=0)
    np.testing.assert_allclose(T.dot_cdf(z, n, eps) + T.dot_cdf(-z, n, eps), 1.0, atol=1e-12)


@pytest.mark.parametrize("n,eps,N", [(50, 10.0, 100_000), (300, 20.0, 20_000)])
def test_eq11_matches_monte_carlo(n, eps, N):
    sd = math.sqrt(T.dot_variance(n, eps))
    z = np.linspace(-3, 3, 13) * sd
    F = T.dot_cdf(z, n, eps)
    Fmc = T.dot_cdf_monte_carlo(z, n, eps, size=N, rng=7)
    tol = K_SE * np.sqrt(F * (1 - F) / N) + 1 / N
    assert np.all(np.abs(Fmc - F) <= tol), np.abs(Fmc - F) / tol


def test_tail_bound_is_a_valid_upper_bound():
    for n, eps in [(2, 1.0), (50, 10.0), (300, 5.0)]:
        sd = math.sqrt(T.dot_variance(n, eps))
        t = np.concatenate([np.linspace(0.01, 3, 30), np.linspace(3, 40, 30)]) * sd
        sf = T.dot_sf(t, n, eps)
        bound = T.dot_tail_bound(t, n, eps)
        assert np.all(bound >= sf) and np.all(bound <= 1.0)
        assert np.all(np.diff(bound) <= 0)
        assert T.dot_tail_bound(0.0, n, eps) == 1.0 and T.dot_tail_bound(-1.0, n, eps) == 1.0
        # the exponential rate is right: the bound is within a polynomial factor at 40 sd
        assert math.log(bound[-1]) / math.log(sf[-1]) > 0.75


def test_sample_dot_uses_the_shared_sampler(monkeypatch):
    calls = []
    real = laplace_module.sample_l2_laplace

    def spy(source, n, d, epsilon):
        calls.append((n, d, epsilon))
        return real(source, n, d, epsilon)

    monkeypatch.setattr(laplace_module, "sample_l2_laplace", spy)
    assert T.sample_dot(50, 3.0, 10, rng=0).shape == (10,)
    assert calls == [(10, 50, 3.0)]


def test_validation():
    with pytest.raises(ValueError, match=r"n must be >= 2, got n=1\."):
        T.dot_variance(1, 1.0)
    with pytest.raises(ValueError, match=r"epsilon must be > 0, got epsilon=0\."):
        T.dot_cdf(0.0, 5, 0.0)
    with pytest.raises(ValueError, match="method must be one of"):
        T.dot_cdf(0.0, 5, 1.0, method="mc")
    with pytest.raises(ValueError, match="z must be finite"):
        T.dot_cdf(np.inf, 5, 1.0)
