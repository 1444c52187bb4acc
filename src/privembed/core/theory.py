"""Closed forms: Gaussian calibration, implied privacy, expected noise norms and cosines.

References
----------
.. [BW18] Balle, B. & Wang, Y.-X. (2018). Improving the Gaussian mechanism for differential
   privacy: analytical calibration and optimal denoising. ICML.
.. [K26] Kaliutau (2026). Privacy-utility trade-off analysis for 1920-dimensional clinical vectors.
.. [A26] Asghar et al. (2026). d_X-privacy for text and the curse of dimensionality. PoPETs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy import optimize, special

from ._validation import check_int, check_real

__all__ = [
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "expected_cosine_gaussian",
    "expected_cosine_gaussian_approx",
    "expected_cosine_laplace",
    "expected_cosine_purkayastha",
    "expected_cosine_radial",
    "laplace_noise_norm_mean",
    "log_analytic_gaussian_delta",
]


def _log1mexp(x: float) -> float:
    """log(1 - exp(x)) for x <= 0, stable."""
    if x > 0:
        return math.nan
    if x == 0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -math.log(2) else math.log1p(-math.exp(x))


def log_analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 2.0) -> float:
    r"""Natural log of the exact delta of the Gaussian mechanism ([BW18] Thm 8).

    .. math::
        \delta(\varepsilon) = \Phi\!\left(\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\right)
        - e^{\varepsilon}\,\Phi\!\left(-\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\right)

    computed in log space (``log_ndtr``), so it stays accurate for epsilon up to 1e4 and
    delta far below 1e-300.
    """
    a = sensitivity / (2.0 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2.0 * sigma) - epsilon * sigma / sensitivity
    la = float(special.log_ndtr(a))
    lb = float(special.log_ndtr(b))
    diff = epsilon + lb - la
    if diff >= 0:  # only by rounding: the true difference is > 0
        return -math.inf
    return la + _log1mexp(diff)


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 2.0) -> float:
    """Exact delta achieved by noise N(0, sigma^2 I) at ``epsilon`` ([BW18] Thm 8).

    Examples
    --------
    >>> round(analytic_gaussian_delta(1.0, 1.0, 1.0), 4)  # Phi(-0.5) - e * Phi(-1.5)
    0.1269
    """
    check_real("sigma", sigma, gt=0)
    check_real("epsilon", epsilon, ge=0)
    check_real("sensitivity", sensitivity, gt=0)
    return math.exp(log_analytic_gaussian_delta(sigma, epsilon, sensitivity))


def _check_gaussian(name: str, value: float, delta: float, sensitivity: float) -> None:
    """The inputs of a Gaussian calibration: ``name`` (sigma or epsilon) > 0, 0 < delta < 1
    and sensitivity > 0."""
    check_real(name, value, gt=0)
    check_real("delta", delta, gt=0, lt=1)
    check_real("sensitivity", sensitivity, gt=0)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 2.0) -> float:
    """Smallest sigma for which the Gaussian mechanism is exactly (epsilon, delta)-DP.

    Solves ``log delta(sigma) = log delta`` by Brent's method in ``log sigma`` ([BW18] Alg. 1
    solves the same equation; we root-find on the exact expression in log space).

    Examples
    --------
    >>> round(analytic_gaussian_sigma(5.0, 1e-5), 4)  # classic formula: 1.9379
    1.7837
    >>> round(analytic_gaussian_sigma(1e4, 1e-5), 5)  # stable far beyond epsilon = 1
    0.01457
    """
    _check_gaussian("epsilon", epsilon, delta, sensitivity)
    target = math.log(delta)

    def f(log_s: float) -> float:
        return log_analytic_gaussian_delta(math.exp(log_s), epsilon, sensitivity) - target

    lo, hi = math.log(sensitivity) - 30.0, math.log(sensitivity) + 30.0
    if f(lo) <= 0:  # pragma: no cover - only for absurd parameters
        return math.exp(lo)
    log_s = optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=500)
    s = math.exp(log_s)
    # Round up to the first representable sigma that satisfies the bound -- evaluated at s
    # itself: exp(log(s)) can be an ulp below s, and then the returned sigma would not satisfy it.
    while log_analytic_gaussian_delta(s, epsilon, sensitivity) > target:
        s = math.nextafter(s, math.inf)
    return s


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 2.0) -> float:
    """The smallest epsilon that noise N(0, sigma^2 I) achieves at ``delta``.

    ``inf`` is never returned for sigma > 0: delta(epsilon) decreases to 0 as epsilon grows.

    Examples
    --------
    >>> round(analytic_gaussian_epsilon(0.2, 1e-5), 1)  # [K26] sigma_emp = 0.2
    91.8
    """
    _check_gaussian("sigma", sigma, delta, sensitivity)
    target = math.log(delta)

    def f(eps: float) -> float:
        return log_analytic_gaussian_delta(sigma, eps, sensitivity) - target

    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2.0
    return float(optimize.brentq(f, 0.0, hi, xtol=1e-12, rtol=1e-12, maxiter=500))


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 2.0) -> float:
    r"""The classic calibration :math:`\sigma = \Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon`.

    Dwork & Roth (2014) Thm A.1; a valid (epsilon, delta) bound only for epsilon < 1. [K26]
    uses it for every epsilon; :func:`analytic_gaussian_delta` tells what it really achieves.

    Examples
    --------
    >>> round(classic_gaussian_sigma(5.0, 1e-5), 3)  # [K26]: sigma ~ 1.94
    1.938
    """
    _check_gaussian("epsilon", epsilon, delta, sensitivity)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


# --------------------------------------------------------------------------------------------
# Expected cosine between a unit vector x and x + Z, Z = R * U with U uniform on the sphere.
# cos(x, x + R U) = (1 + R t) / sqrt(1 + 2 R t + R^2), t = <x, U> with density
# proportional to (1 - t^2)^((d-3)/2) on [-1, 1].  Renormalising the output does not change it.
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _direction_nodes(d: int, n: int = 160) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature for t = <x, U>: Gauss-Jacobi (``n`` nodes) for d <= 60; for larger d the
    trapezoidal rule on 801 points of sqrt(d - 1) * t in [-12, 12] weighted by the exact density
    (spectrally accurate for this smooth, fast-decaying integrand: errors below 1e-12)."""
    a = (d - 3) / 2.0
    if d <= 60:
        t, w = special.roots_jacobi(n, a, a)
        w = w / w.sum()
        return t, w
    # For large d the density of sqrt(d - 1) * t is close to normal; integrate the exact density
    # on a fine grid of the scaled variable instead (Jacobi nodes lose accuracy for huge a).
    s = np.linspace(-12.0, 12.0, 801)
    t = s / math.sqrt(d - 1.0)
    mask = np.abs(t) < 1
    t, s = t[mask], s[mask]
    logw = a * np.log1p(-(t**2))
    w = np.exp(logw - logw.max())
    w = w / w.sum()
    return t, w


def _cosine_given_radius(R: np.ndarray, d: int) -> np.ndarray:
    r"""E_U[cos(x, x + R U)] for each radius in ``R``.

    Closed forms for d = 2 and 3, where the integrand's near-singularity at t = -1, R = 1 defeats
    a fixed quadrature (errors up to 5e-4 for d = 2 and 3e-6 for d = 3 with 160 nodes):

    * d = 3 (t uniform): :math:`1 - R^2/3` for R <= 1, :math:`2/(3R)` for R > 1;
    * d = 2: :math:`[(1+R)E(m) + (1-R)K(m)]/\pi`, :math:`m = 4R/(1+R)^2`, with the complete
      elliptic integrals K and E (K evaluated as ``ellipkm1(1 - m)`` for accuracy near R = 1).

    Above, Gauss quadrature over t (error below 5e-8 for d = 4 and 1e-9 for d >= 5).
    """
    if d == 2:
        p = ((1.0 - R) / (1.0 + R)) ** 2  # 1 - m, computed without cancellation
        with np.errstate(divide="ignore", invalid="ignore"):  # K(1) = inf at R = 1
            k_term = np.where(p > 0, (1.0 - R) * special.ellipkm1(p), 0.0)
        return ((1.0 + R) * special.ellipe(1.0 - p) + k_term) / math.pi
    if d == 3:
        return np.where(R <= 1.0, 1.0 - R**2 / 3.0, 2.0 / (3.0 * np.maximum(R, 1.0)))
    t, wt = _direction_nodes(int(d))
    Rc = R[:, None]
    num = 1.0 + Rc * t[None, :]
    den = np.sqrt(np.maximum(1.0 + 2.0 * Rc * t[None, :] + Rc**2, 1e-300))
    return (num / den) @ wt


def expected_cosine_radial(radii: np.ndarray, radius_weights: np.ndarray, d: int) -> float:
    """E[cos(x, x + R U)] for a radius law given by quadrature nodes/weights, U uniform on S^{d-1}."""
    R = np.asarray(radii, dtype=np.float64).ravel()
    return float(np.asarray(radius_weights) @ _cosine_given_radius(R, int(d)))


def _radius_rule(
    log_density: Callable[[np.ndarray], np.ndarray],
    lo: float,
    hi: float,
    panels: int = 64,
    order: int = 16,
) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes and normalised weights for a radius law on [lo, hi].

    Composite Gauss-Legendre with the weights times the exact (unnormalised) density. E[cos | R]
    is smooth except at R = 1 (a jump in a higher derivative, and for d = 2 a logarithmic
    singularity of the first derivative), so [lo, hi] is split at 1 and the panels are graded
    (cubically) towards it. Checked against adaptive quadrature for the Gaussian and Laplace radius
    laws, d = 2 to 1920: errors below 1e-12.
    """
    x, w = np.polynomial.legendre.leggauss(order)
    u = np.linspace(0.0, 1.0, panels + 1)
    cuts = [lo, 1.0, hi] if lo < 1.0 < hi else [lo, hi]
    nodes, weights = [], []
    for a, b in itertools.pairwise(cuts):
        if b == 1.0:  # dense towards the right end
            edges = a + (b - a) * (1.0 - (1.0 - u) ** 3)
        elif a == 1.0:  # dense towards the left end
            edges = a + (b - a) * u**3
        else:
            edges = a + (b - a) * u
        mid = 0.5 * (edges[:-1] + edges[1:])
        half = 0.5 * (edges[1:] - edges[:-1])
        nodes.append((mid[:, None] + half[:, None] * x).ravel())
        weights.append((half[:, None] * w).ravel())
    r = np.concatenate(nodes)
    logw = np.log(np.concatenate(weights)) + log_density(r)
    wt = np.exp(logw - logw.max())
    return r, wt / wt.sum()


def expected_cosine_gaussian(sigma: float, d: int) -> float:
    r"""Exact E[cos(x, x + Z)] for a unit x and Z ~ N(0, sigma^2 I_d).

    ``|Z| = sigma * sqrt(V)`` with ``V ~ chi^2_d`` independent of the direction; the expectation
    is a two-dimensional integral evaluated by Gauss quadrature (closed forms over the direction
    for d = 2, 3; accurate to ~1e-8 for every d >= 2). Compare
    :func:`expected_cosine_gaussian_approx`, the [K26] closed form.

    Examples
    --------
    >>> round(expected_cosine_gaussian(0.2, 1920), 3)
    0.113
    """
    check_real("sigma", sigma, ge=0)
    d = check_int("d", d, ge=2)
    if sigma == 0:
        return 1.0
    # |Z| / sigma ~ chi_d: density of |Z| proportional to r^(d-1) exp(-r^2 / (2 sigma^2))
    lo = sigma * math.sqrt(2.0 * float(special.gammaincinv(d / 2.0, 1e-15)))
    hi = sigma * math.sqrt(2.0 * float(special.gammaincinv(d / 2.0, 1.0 - 1e-15)))
    r, w = _radius_rule(
        lambda r: (d - 1.0) * np.log(np.maximum(r, 1e-300)) - 0.5 * (r / sigma) ** 2, lo, hi
    )
    return expected_cosine_radial(r, w, d)


def expected_cosine_gaussian_approx(sigma: float, d: int) -> float:
    r"""[K26] §2: :math:`E[\cos] \approx 1/\sqrt{1 + d\sigma^2}` (the noise norm concentrates).

    Examples
    --------
    >>> round(expected_cosine_gaussian_approx(0.2, 1920), 4)
    0.1134
    """
    check_real("sigma", sigma, ge=0)
    d = check_int("d", d, ge=1)
    return 1.0 / math.sqrt(1.0 + d * sigma**2)


def laplace_noise_norm_mean(epsilon: float, d: int) -> float:
    """E|Z| = d / epsilon for the multivariate Laplace (radius Gamma(d, 1/epsilon))."""
    return check_int("d", d, ge=1) / check_real("epsilon", epsilon, gt=0)


def expected_cosine_laplace(epsilon: float, d: int) -> float:
    """Exact E[cos(x, x + Z)] for a unit x and multivariate Laplace noise at ``epsilon``.

    Examples
    --------
    >>> 0.0 < expected_cosine_laplace(10.0, 384) < expected_cosine_laplace(100.0, 384) < 1.0
    True
    """
    epsilon = check_real("epsilon", epsilon, gt=0)
    d = check_int("d", d, ge=2)
    # |Z| ~ Gamma(d, 1/epsilon): density proportional to r^(d-1) exp(-epsilon r)
    lo = float(special.gammaincinv(float(d), 1e-15)) / epsilon
    hi = float(special.gammaincinv(float(d), 1.0 - 1e-15)) / epsilon
    r, w = _radius_rule(lambda r: (d - 1.0) * np.log(np.maximum(r, 1e-300)) - epsilon * r, lo, hi)
    return expected_cosine_radial(r, w, d)


def _purkayastha_log_density_grid(epsilon: float, d: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    theta = (np.arange(m) + 0.5) * (math.pi / m)
    logf = -epsilon * theta + (d - 2) * np.log(np.sin(theta))
    return theta, logf


def expected_cosine_purkayastha(epsilon: float, d: int) -> float:
    r"""E[cos theta] for the Purkayastha density :math:`\propto e^{-\varepsilon\theta}\sin^{d-2}\theta`.

    Examples
    --------
    >>> round(expected_cosine_purkayastha(0.0, 3), 6)  # uniform direction on S^2
    0.0
    """
    epsilon = check_real("epsilon", epsilon, ge=0)
    d = check_int("d", d, ge=2)
    theta, logf = _purkayastha_log_density_grid(epsilon, d, 200_000)
    w = np.exp(logf - logf.max())
    return float(np.sum(w * np.cos(theta)) / np.sum(w))
