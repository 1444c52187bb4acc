"""Exact reference laws and test statistics shared by the mechanism distribution tests.

Conventions (STYLE.md "Tests"): every statistical test uses a fixed seed and one of two
criteria, stated where it is used:

* a goodness-of-fit test against the exact law (Kolmogorov-Smirnov, chi-square) passes when its
  p-value is above ``P_MIN = 1e-3``;
* a moment test passes when the estimate is within ``K_SE = 4.4`` standard errors of the exact
  value (two-sided false-alarm rate about 1e-5 per test), the standard error derived from the
  sample size (and the exact variance where it is known).

Nothing here uses the code under test: the reference CDFs are computed independently
(scipy.stats distributions, adaptive quadrature with ``scipy.integrate.quad``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import integrate, stats

__all__ = [
    "K_SE",
    "P_MIN",
    "ExactAngleLaw",
    "angles_to",
    "assert_mean_within",
    "axis_cosines",
    "check_radius_and_direction",
    "ks_pvalue",
    "unit_rows",
]

P_MIN = 1e-3
K_SE = 4.4


def unit_rows(rng: np.random.Generator, n: int, d: int) -> NDArray[np.float64]:
    """``n`` independent uniform unit vectors in R^d."""
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def ks_pvalue(cdf_values: NDArray[np.float64]) -> float:
    """Two-sided KS p-value of ``F(sample)`` against U(0, 1) (probability integral transform)."""
    return float(stats.kstest(np.asarray(cdf_values, dtype=np.float64), "uniform").pvalue)


def axis_cosines(Z: NDArray[np.float64], axis: NDArray[np.float64]) -> NDArray[np.float64]:
    """Cosine between each row of ``Z`` and a fixed unit ``axis``."""
    return (Z @ axis) / np.linalg.norm(Z, axis=1)


def angles_to(X: NDArray[np.float64], Y: NDArray[np.float64]) -> NDArray[np.float64]:
    """Angle between unit rows ``X`` and ``Y``, accurate also for tiny angles (atan2 form)."""
    c = np.einsum("ij,ij->i", X, Y)
    s = np.linalg.norm(Y - c[:, None] * X, axis=1)
    return np.arctan2(s, c)


def assert_mean_within(
    values: NDArray[np.float64], expected: float, *, sd: float | None = None, what: str = "mean"
) -> None:
    """Assert ``|mean(values) - expected| <= K_SE * sd / sqrt(n)``.

    ``sd`` is the exact standard deviation of one value when known, else the sample one.
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    s = float(np.std(v, ddof=1)) if sd is None else float(sd)
    se = s / math.sqrt(n)
    got = float(v.mean())
    assert abs(got - expected) <= K_SE * se, (
        f"{what}: {got!r} vs exact {expected!r}, |diff| = {abs(got - expected):.3g} > "
        f"{K_SE} SE = {K_SE * se:.3g} (n = {n})"
    )


def check_radius_and_direction(
    Z: np.ndarray, epsilon: float, axis: np.ndarray, *, what: str = "Z"
) -> None:
    """Assert that rows of Z follow the l2 Laplace law exp(-epsilon |z|) on R^d."""
    n, d = Z.shape
    r = np.linalg.norm(Z, axis=1)
    # radius ~ Gamma(d, 1/epsilon): KS p > 1e-3, and the mean within 4.4 exact SEs
    p_r = ks_pvalue(stats.gamma.cdf(r, d, scale=1.0 / epsilon))
    assert p_r > P_MIN, f"{what}: radius KS p = {p_r:.3g}"
    assert_mean_within(r, d / epsilon, sd=math.sqrt(d) / epsilon, what=f"{what} E|Z|")
    # direction: cos to a fixed axis, (t+1)/2 ~ Beta((d-1)/2, (d-1)/2): KS p > 1e-3
    t = axis_cosines(Z, axis)
    a = (d - 1) / 2.0
    p_t = ks_pvalue(stats.beta.cdf((t + 1) / 2, a, a))
    assert p_t > P_MIN, f"{what}: direction KS p = {p_t:.3g}"
    # Var(t) = 1/d, with the exact sd of t^2: sqrt(3/(d(d+2)) - 1/d^2)
    assert_mean_within(
        t**2, 1.0 / d, sd=math.sqrt(3.0 / (d * (d + 2)) - 1.0 / d**2), what=f"{what} Var(t)"
    )
    # radius independent of direction: Pearson correlation of r and t^2, SE ~ 1/sqrt(n)
    rho = float(np.corrcoef(r, t**2)[0, 1])
    assert abs(rho) < K_SE / math.sqrt(n), f"{what}: corr(r, t^2) = {rho:.3g}"


class ExactAngleLaw:
    r"""Law of the Purkayastha angle, :math:`f(\theta) \propto e^{-\varepsilon\theta}\sin^{d-2}\theta`
    on :math:`[0, \pi]`, by adaptive quadrature (``scipy.integrate.quad``, relative tolerance
    1e-12, absolute 1e-14 of the total mass per piece) of the density scaled by its maximum
    (log-safe: the exponent is formed in log space and never overflows).

    The interval is split at the mode and at multiples of the density's natural width, so that
    ``quad`` sees every part of a sharply peaked density (e.g. epsilon = 1e4).
    """

    def __init__(self, epsilon: float, d: int) -> None:
        self.epsilon = float(epsilon)
        self.d = int(d)
        if self.d == 2:
            self.mode, width = 0.0, 1.0 / self.epsilon
            self.gmax = 0.0
        else:
            self.mode = math.atan2(self.d - 2, self.epsilon)
            width = math.sin(self.mode) / math.sqrt(self.d - 2)
            self.gmax = self._g(self.mode)
        # absolute tolerance: the total mass is about width * (max density = 1)
        self.epsabs = 1e-14 * width
        k = np.arange(-150, 151)
        bp = self.mode + k * width
        self.breaks = np.unique(np.concatenate([[0.0, math.pi], bp[(bp > 0.0) & (bp < math.pi)]]))
        pieces = [self._quad(a, b) for a, b in zip(self.breaks[:-1], self.breaks[1:], strict=True)]
        self.cum = np.concatenate([[0.0], np.cumsum(pieces)])
        self.total = float(self.cum[-1])

    def _g(self, t: float) -> float:
        logsin = (self.d - 2) * math.log(math.sin(t)) if self.d > 2 else 0.0
        return -self.epsilon * t + logsin

    def density(self, t: float) -> float:
        """Unnormalised density, scaled so that its maximum is 1."""
        if self.d > 2 and (t <= 0.0 or t >= math.pi):
            return 0.0
        return math.exp(self._g(t) - self.gmax)

    def _quad(self, a: float, b: float) -> float:
        if b <= a:
            return 0.0
        val, _ = integrate.quad(self.density, a, b, epsabs=self.epsabs, epsrel=1e-12, limit=200)
        return float(val)

    def cdf(self, theta: NDArray[np.float64]) -> NDArray[np.float64]:
        """CDF at each angle (sorted internally; each piece integrated once)."""
        t = np.clip(np.asarray(theta, dtype=np.float64).ravel(), 0.0, math.pi)
        order = np.argsort(t)
        out = np.empty_like(t)
        # walk the sorted angles, integrating from the previous point (or a break) each time
        prev_t, prev_mass = 0.0, 0.0
        for i in order:
            ti = float(t[i])
            j = int(np.searchsorted(self.breaks, ti, side="right") - 1)
            j = min(max(j, 0), len(self.breaks) - 2)
            start = float(self.breaks[j])
            if prev_t >= start:
                mass = prev_mass + self._quad(prev_t, ti)
            else:
                mass = float(self.cum[j]) + self._quad(start, ti)
            out[i] = mass / self.total
            prev_t, prev_mass = ti, mass
        return np.clip(out, 0.0, 1.0).reshape(np.shape(theta))

    def mean_cos(self) -> float:
        """E[cos theta] by the same quadrature."""
        num = 0.0
        for a, b in zip(self.breaks[:-1], self.breaks[1:], strict=True):
            v, _ = integrate.quad(
                lambda t: math.cos(t) * self.density(t),
                a,
                b,
                epsabs=self.epsabs,
                epsrel=1e-12,
                limit=200,
            )
            num += v
        return num / self.total
