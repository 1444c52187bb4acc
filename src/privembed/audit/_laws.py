"""The exact laws the audit computes on its own, independently of the mechanisms' samplers.

The reference angle law of the Purkayastha mechanism (:class:`AngleLaw`), the maximum-likelihood
fits the white box uses (the angle law's epsilon, a Gamma shape), and the quadrature grids from
which the score laws (:class:`~._bounds.ScoreLaw`: the exact law of a family's statistic for a
correct mechanism, hence the power of an audit) are built.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from ._bounds import ScoreLaw

__all__ = [
    "AngleLaw",
    "gamma_radius_grid",
    "gamma_shape_mle",
    "gaussian_normalised_law",
    "purkayastha_mle",
    "sphere_cos_grid",
]

#: grid resolution of the power calculations (nats below the mode that are represented)
_NATS = 80.0


def _log_grid(
    logdens: Any, mode: float, n: int, nats: float = _NATS
) -> tuple[NDArray[Any], NDArray[Any]]:
    """Uniform nodes on the interval where a concave log-density is within ``nats`` of its mode.

    Returns (nodes, log-weights) with the weights = density x spacing (unnormalised).
    """
    top = float(logdens(np.array([mode]))[0])

    def edge(step: float) -> float:
        a, b = mode, mode + step
        while float(logdens(np.array([b]))[0]) > top - nats:
            a, b = b, b + 2.0 * (b - a)
        for _ in range(100):
            m = 0.5 * (a + b)
            if float(logdens(np.array([m]))[0]) > top - nats:
                a = m
            else:
                b = m
        return b

    lo, hi = edge(-1e-3 - 1e-3 * abs(mode)), edge(1e-3 + 1e-3 * abs(mode))
    x = np.linspace(lo, hi, n)
    return x, logdens(x) + math.log((hi - lo) / (n - 1))


def sphere_cos_grid(d: int, n: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """Nodes of c = <u, e> for u uniform on S^{d-1} (d >= 2), via u = log tan(theta/2)."""
    m = d - 1  # density of theta is sin^(d-2); per du (dtheta/du = sin theta) it is sin^(d-1)
    bound = math.acosh(math.exp(min(_NATS / m, 700.0)))
    u = np.linspace(-bound, bound, n)
    logw = -m * np.log(np.cosh(u)) + math.log(2 * bound / (n - 1))
    return np.tanh(-u), logw  # cos(2 atan(e^u)) = -tanh(u)


def gamma_radius_grid(d: int, eps: float, n: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """Nodes of r ~ Gamma(d, 1/eps) on a log scale (density of log r: d log r - eps r)."""

    def logdens(L: NDArray[Any]) -> NDArray[Any]:
        return d * L - eps * np.exp(L)

    L, lw = _log_grid(logdens, math.log(d / eps), n)
    return np.exp(L), lw


def _chi_grid(m: int, n: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """Nodes of R ~ chi_m (m >= 1) on a log scale."""

    def logdens(L: NDArray[Any]) -> NDArray[Any]:
        return m * L - np.exp(2.0 * L) / 2.0

    L, lw = _log_grid(logdens, 0.5 * math.log(m), n)
    return np.exp(L), lw


class AngleLaw:
    r"""The law :math:`f(\theta) \propto e^{-\varepsilon\theta}\sin^{d-2}\theta` on [0, pi].

    Computed here independently of the mechanism's sampler (trapezoid rule on a uniform grid
    over the interval where the log-density is within 80 nats of its maximum).
    """

    def __init__(self, epsilon: float, d: int, m: int = 200_001) -> None:
        self.epsilon, self.d = float(epsilon), int(d)
        self._norm: float | None = None
        lo, hi = self._support()
        self.theta = np.linspace(lo, hi, m)
        logf = self.log_density(self.theta)
        f = np.exp(logf - logf.max())
        h = (hi - lo) / (m - 1)
        cum = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) * (h / 2.0))])
        self.cdf_grid = cum / cum[-1]
        w = f * h
        w[0] /= 2.0
        w[-1] /= 2.0
        self.weights = w / w.sum()
        self.log_weights = np.log(np.maximum(self.weights, 1e-320))

    def log_density(self, t: NDArray[Any]) -> NDArray[Any]:
        if self.d == 2:
            return -self.epsilon * t
        with np.errstate(divide="ignore"):
            return -self.epsilon * t + (self.d - 2) * np.log(np.sin(t))

    def _support(self) -> tuple[float, float]:
        eps, d = self.epsilon, self.d
        if d == 2:
            return 0.0, min(math.pi, _NATS / eps)
        mode = math.atan2(d - 2, eps)
        top = float(self.log_density(np.array([mode]))[0])

        def solve(a: float, b: float) -> float:  # g(a) below the floor, g(b) above
            for _ in range(200):
                m = 0.5 * (a + b)
                if float(self.log_density(np.array([m]))[0]) > top - _NATS:
                    b = m
                else:
                    a = m
            return b

        lo = solve(0.0, mode)
        end = math.pi
        if float(self.log_density(np.array([end - 1e-12]))[0]) > top - _NATS:
            return lo, end
        return lo, solve(end, mode)  # search from pi towards the mode

    def cdf(self, t: NDArray[Any]) -> NDArray[Any]:
        return np.interp(t, self.theta, self.cdf_grid, left=0.0, right=1.0)

    def mass(self, a: float, b: float) -> float:
        """P(a <= theta <= b) by adaptive quadrature (accurate also for tiny intervals)."""
        a, b = max(a, 0.0), min(b, math.pi)
        if not b > a:
            return 0.0
        top = float(np.max(self.log_density(self.theta)))

        def f(t: float) -> float:
            return math.exp(float(self.log_density(np.array([t]))[0]) - top)

        if self._norm is None:
            self._norm = self._quad(f, float(self.theta[0]), float(self.theta[-1]))
        return min(1.0, self._quad(f, a, b) / self._norm)

    @staticmethod
    def _quad(f: Any, a: float, b: float) -> float:
        from scipy import integrate

        pts = np.linspace(a, b, 9)
        return float(
            sum(
                integrate.quad(f, x, y, limit=200, epsabs=0.0)[0]
                for x, y in itertools.pairwise(pts)
            )
        )

    def moments(self) -> tuple[float, float]:
        mean = float(self.weights @ self.theta)
        var = float(self.weights @ (self.theta - mean) ** 2)
        return mean, var


def purkayastha_mle(theta: NDArray[Any], d: int) -> tuple[float, float]:
    """MLE of epsilon from angles (solves E_eps[theta] = mean) and the variance of theta there."""
    target = float(np.mean(theta))

    def f(log_eps: float) -> float:
        return AngleLaw(math.exp(log_eps), d, m=20_001).moments()[0] - target

    lo, hi = math.log(1e-6), math.log(1e7)
    if f(lo) <= 0:
        eps = math.exp(lo)
    elif f(hi) >= 0:
        eps = math.exp(hi)
    else:
        eps = math.exp(optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-12))
    return eps, AngleLaw(eps, d, m=20_001).moments()[1]


def gamma_shape_mle(r: NDArray[Any]) -> tuple[float, float]:
    """MLE of a Gamma shape (scale free) and its standard error."""
    s = float(math.log(r.mean()) - np.mean(np.log(r)))
    if not s > 0:
        return math.inf, 0.0

    def f(log_k: float) -> float:
        k = math.exp(log_k)
        return math.log(k) - float(special.digamma(k)) - s

    k = math.exp(optimize.brentq(f, math.log(1e-6), math.log(1e9), xtol=1e-14))
    info = k * float(special.polygamma(1, k)) - 1.0
    se = math.sqrt(k / (r.size * info)) if info > 0 else math.inf
    return k, se


def gaussian_normalised_law(sigma: float, rho: float, k: int, n: int = 1500) -> ScoreLaw:
    """Law of <y/|y|, e> for y = -+rho e + sigma g, g ~ N(0, I_k)."""
    g = np.linspace(-40.0, 40.0, n)
    lg = -(g**2) / 2.0
    if k == 1:
        R, lr = np.zeros(1), np.zeros(1)
    else:
        R, lr = _chi_grid(k - 1, n)
    lw = (lg[:, None] + lr[None, :]).ravel()
    b2 = (sigma * R[None, :]) ** 2
    out = []
    for c in (-rho, rho):
        a = c + sigma * g[:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append((a / np.sqrt(a * a + b2)).ravel())
    return ScoreLaw(out[0], lw, out[1], lw, exact=True)
