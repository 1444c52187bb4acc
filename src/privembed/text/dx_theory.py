r"""The noisy dot product of [A26] §5–6: the law of :math:`Z = \langle \mathbf{Z}, \mathbf{u} \rangle`.

Whether the multivariate Laplace mechanism moves a word ``w`` to another word ``x`` depends on
the projection of the noise vector onto the unit vector from ``w`` to ``x``:
:math:`\|w + \mathbf{Z} - x\| < \|\mathbf{Z}\|` iff :math:`Z > \|w - x\|/2`, where
:math:`Z = \langle\mathbf{Z}, (x - w)/\|x - w\|\rangle`. In polar form
:math:`\mathbf{Z} = R\,\mathbf{U}`, :math:`R \sim \mathrm{Gamma}(n, 1/\varepsilon)` and
:math:`\mathbf{U}` uniform on the sphere :math:`S^{n-1}`, so :math:`Z = R B` with the
*angular component* :math:`B = \langle \mathbf{U}, \mathbf{u}\rangle`.

* :func:`angular_pdf` -- :math:`f_B(b) = (1-b^2)^{(n-3)/2} / \mathrm{B}(\tfrac12, \tfrac{n-1}{2})`
  on :math:`[-1, 1]` ([A26] Thm 3); :func:`angular_cdf` through the regularised incomplete beta.
* :func:`angular_moment` -- :math:`\mu(j, n) = E[B^j]`: 0 for odd ``j``, and
  :math:`\Gamma(\tfrac n2)\Gamma(\tfrac{j+1}2) / (\sqrt\pi\,\Gamma(\tfrac{n+j}2))` for even ``j``
  ([A26] Thm 4); :func:`dot_moment` -- :math:`E[Z^j] = E[R^j]\,\mu(j, n)`.
* :func:`dot_variance` -- :math:`\mathrm{Var}\,Z = (n+1)/\varepsilon^2` ([A26] Thm 9).
* :func:`dot_cdf` -- :math:`F_Z(z) = \int_0^\infty f_R(r)\,F_B(z/r)\,dr` ([A26] eq. 11) by
  quadrature; :func:`dot_cdf_monte_carlo` -- the same by sampling the shared Laplace sampler.
* :func:`dot_tail_bound` -- an upper bound on :math:`P(Z \ge t)` (see its notes).

A second, independent expression is used to cross-check eq. 11: the characteristic function of
the density :math:`\propto e^{-\varepsilon\|z\|}` is :math:`(1 + \|t\|^2/\varepsilon^2)^{-(n+1)/2}`,
so :math:`Z` has the law of :math:`(G_1 - G_2)/\varepsilon` with :math:`G_1, G_2` independent
:math:`\mathrm{Gamma}((n+1)/2, 1)` (``method="gamma-difference"``); this also gives
:math:`\mathrm{Var}\,Z = (n+1)/\varepsilon^2` and the moment generating function used by the
tail bound.

References
----------
.. [A26] Asghar, Carpentier, Zhao, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs. arXiv:2411.13784.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ..core._validation import check_choice, check_int, check_real
from ..core.rng import as_generator
from ..mechanisms import laplace as _laplace
from ..mechanisms.base import GeneratorSource

__all__ = [
    "angular_cdf",
    "angular_moment",
    "angular_pdf",
    "dot_cdf",
    "dot_cdf_monte_carlo",
    "dot_moment",
    "dot_sf",
    "dot_tail_bound",
    "dot_variance",
    "radius_moment",
    "sample_dot",
]

_CDF_METHODS = ("integral", "gamma-difference")


def _dim(n: Any) -> int:
    return check_int("n", n, ge=2)


def angular_pdf(b: Any, n: int) -> NDArray[np.float64]:
    r"""Density :math:`f_B` of :math:`B = \langle\mathbf U, \mathbf u\rangle`, U uniform on :math:`S^{n-1}`.

    Examples
    --------
    >>> round(float(angular_pdf(0.0, 3)), 12)  # uniform on [-1, 1] for n = 3
    0.5
    """
    n = _dim(n)
    b = np.asarray(b, dtype=np.float64)
    inside = np.abs(b) < 1
    a = (n - 3) / 2.0
    logc = -special.betaln(0.5, (n - 1) / 2.0)
    with np.errstate(divide="ignore"):
        val = np.exp(logc + a * np.log1p(-np.where(inside, b * b, 0.0)))
    return np.where(inside, val, 0.0)


def angular_cdf(b: Any, n: int) -> NDArray[np.float64]:
    """CDF :math:`F_B`: ``(1 + B)/2`` is Beta((n-1)/2, (n-1)/2).

    Examples
    --------
    >>> round(float(angular_cdf(0.0, 50)), 12), float(angular_cdf(1.0, 50))
    (0.5, 1.0)
    """
    n = _dim(n)
    a = (n - 1) / 2.0
    x = (1.0 + np.clip(np.asarray(b, dtype=np.float64), -1.0, 1.0)) / 2.0
    return np.asarray(special.betainc(a, a, x), dtype=np.float64)


def angular_moment(j: int, n: int) -> float:
    r""":math:`\mu(j, n) = E[B^j]` ([A26] Thm 4).

    Examples
    --------
    >>> round(angular_moment(2, 50), 12), angular_moment(3, 50)  # E[B^2] = 1/n
    (0.02, 0.0)
    """
    j = check_int("j", j, ge=0)
    n = _dim(n)
    if j % 2:
        return 0.0
    logm = (
        special.gammaln(n / 2.0)
        + special.gammaln((j + 1) / 2.0)
        - 0.5 * math.log(math.pi)
        - special.gammaln((n + j) / 2.0)
    )
    return math.exp(logm)


def radius_moment(j: int, n: int, epsilon: float) -> float:
    r""":math:`E[R^j] = \Gamma(n + j) / (\Gamma(n)\,\varepsilon^j)` for :math:`R \sim \mathrm{Gamma}(n, 1/\varepsilon)`."""
    j = check_int("j", j, ge=0)
    n = _dim(n)
    epsilon = check_real("epsilon", epsilon, gt=0)
    return math.exp(special.gammaln(n + j) - special.gammaln(n) - j * math.log(epsilon))


def dot_moment(j: int, n: int, epsilon: float) -> float:
    r""":math:`E[Z^j] = E[R^j]\,\mu(j, n)` (R and B are independent).

    Examples
    --------
    >>> round(dot_moment(2, 50, 10.0), 12) == round(dot_variance(50, 10.0), 12)
    True
    """
    return radius_moment(j, n, epsilon) * angular_moment(j, n)


def dot_variance(n: int, epsilon: float) -> float:
    r""":math:`\mathrm{Var}\,Z = (n + 1)/\varepsilon^2` ([A26] Thm 9).

    Examples
    --------
    >>> dot_variance(50, 10.0)
    0.51
    """
    n = _dim(n)
    epsilon = check_real("epsilon", epsilon, gt=0)
    return (n + 1) / epsilon**2


@lru_cache(maxsize=8)
def _gauss_legendre(m: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    x, w = np.polynomial.legendre.leggauss(m)
    return (x + 1.0) / 2.0, w / 2.0  # nodes and weights on [0, 1]


def _panel_nodes(a: float, b: float, nodes: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Composite Gauss-Legendre on [a, b], panels growing geometrically away from ``a`` (where
    the integrands below vary fastest), ``nodes`` points per panel."""
    panels = 40
    edges = a + (b - a) * (np.geomspace(1.0, 2.0**30, panels + 1) - 1.0) / (2.0**30 - 1.0)
    t, w = _gauss_legendre(nodes)
    width = np.diff(edges)[:, None]
    x = (edges[:-1, None] + width * t[None, :]).ravel()
    return x, (width * w[None, :]).ravel()


def _log_gamma_pdf(x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
    return (k - 1.0) * np.log(x) - x - special.gammaln(k)


def _lower_cdf(z: float, n: int, epsilon: float, method: str, nodes: int) -> float:
    """F_Z(z) for z < 0, computed directly (no cancellation in the tail).

    Both formulas integrate a smooth integrand over the half-line where it is non-zero,
    up to a point beyond which the remaining mass is below 1e-300.
    """
    k = float(n) if method == "integral" else (n + 1) / 2.0
    a = -z * epsilon  # in units of 1/epsilon: R*eps > a, resp. G2 > a
    b = max(float(special.gammainccinv(k, 1e-300)), 2.0 * a + 1.0)
    x, w = _panel_nodes(a, b, nodes)
    dens = np.exp(_log_gamma_pdf(x, k))
    if method == "integral":  # eq. 11: E[F_B(z / R)]
        vals = angular_cdf(-a / x, n)
    else:  # P(G1 <= eps z + G2)
        vals = special.gammainc(k, x - a)
    return float(np.dot(w, dens * vals))


def dot_cdf(z: Any, n: int, epsilon: float, *, method: str = "integral", nodes: int = 32) -> Any:
    r""":math:`F_Z(z) = P(Z \le z)` by numerical integration.

    Parameters
    ----------
    z : float or array_like
    n : int, >= 2
        Dimension.
    epsilon : float, > 0
    method : {"integral", "gamma-difference"}
        ``"integral"``: [A26] eq. 11, :math:`\int f_R(r) F_B(z/r) dr`. ``"gamma-difference"``:
        :math:`P(G_1 - G_2 \le \varepsilon z)` (see the module notes) -- an independent check.
    nodes : int
        Gauss-Legendre nodes per panel (40 panels; the default gives a relative accuracy
        of about 1e-8 or better, tails included, for 2 <= n <= 1000).

    Returns
    -------
    float or ndarray
        Same shape as ``z``. Lower tails are computed directly, upper tails by symmetry.

    Examples
    --------
    >>> float(dot_cdf(0.0, 50, 10.0))
    0.5
    >>> a = dot_cdf(-1.0, 50, 10.0); b = dot_cdf(-1.0, 50, 10.0, method="gamma-difference")
    >>> bool(abs(a - b) < 1e-10)
    True
    """
    n = _dim(n)
    epsilon = check_real("epsilon", epsilon, gt=0)
    method = check_choice("method", method, _CDF_METHODS)
    nodes = check_int("nodes", nodes, ge=8)
    zz = np.asarray(z, dtype=np.float64)
    out = np.empty(zz.shape, dtype=np.float64)
    for idx, val in np.ndenumerate(zz):
        if not math.isfinite(val):
            raise ValueError(f"z must be finite, got z={val!r}.")
        if val == 0.0:
            out[idx] = 0.5
        elif val < 0.0:
            out[idx] = _lower_cdf(val, n, epsilon, method, nodes)
        else:
            out[idx] = 1.0 - _lower_cdf(-val, n, epsilon, method, nodes)
    return float(out) if out.ndim == 0 else out


def dot_sf(z: Any, n: int, epsilon: float, **kwargs: Any) -> Any:
    """:math:`P(Z > z) = F_Z(-z)` (Z is symmetric): accurate deep in the upper tail.

    For a word ``w`` and another word ``x``, ``dot_sf(|w - x| / 2, n, epsilon)`` is the
    probability that the noisy ``w`` lands closer to ``x`` than to ``w``.
    """
    return dot_cdf(-np.asarray(z, dtype=np.float64), n, epsilon, **kwargs)


def sample_dot(n: int, epsilon: float, size: int, *, rng: Any = None) -> NDArray[np.float64]:
    """``size`` draws of Z: the first coordinate of multivariate Laplace noise from the shared
    sampler (:func:`privembed.mechanisms.laplace.sample_l2_laplace`); by rotational invariance
    this is the projection on any fixed unit vector."""
    n = _dim(n)
    epsilon = check_real("epsilon", epsilon, gt=0)
    size = check_int("size", size, ge=1)
    source = GeneratorSource(as_generator(rng))
    block = max(1, 2**20 // n)
    parts = []
    for start in range(0, size, block):
        m = min(block, size - start)
        parts.append(_laplace.sample_l2_laplace(source, m, n, epsilon)[:, 0].copy())
    return np.concatenate(parts)


def dot_cdf_monte_carlo(
    z: Any, n: int, epsilon: float, *, size: int = 100_000, rng: Any = None
) -> Any:
    """Empirical :math:`F_Z(z)` from ``size`` draws of :func:`sample_dot` (standard error
    :math:`\\sqrt{F(1-F)/\\text{size}}`)."""
    draws = np.sort(sample_dot(n, epsilon, size, rng=rng))
    zz = np.asarray(z, dtype=np.float64)
    F = np.searchsorted(draws, zz, side="right") / draws.size
    return float(F) if np.ndim(F) == 0 else F


def dot_tail_bound(t: Any, n: int, epsilon: float) -> Any:
    r"""An upper bound on :math:`P(Z \ge t)` (Chernoff bound, optimised in closed form).

    Notes
    -----
    The moment generating function is :math:`E[e^{\lambda Z}] = (1 - \lambda^2/\varepsilon^2)^{-m/2}`
    for :math:`|\lambda| < \varepsilon`, :math:`m = n + 1`. Minimising
    :math:`e^{-\lambda t}E[e^{\lambda Z}]` over :math:`\lambda` gives, with :math:`s = \varepsilon t`,
    :math:`\ell = \lambda/\varepsilon = (\sqrt{m^2 + 4s^2} - m)/(2s)`, the bound
    :math:`P(Z \ge t) \le \exp(-\ell s)(1 - \ell^2)^{-m/2}` for :math:`t > 0` (and 1 otherwise).
    For large ``t`` it decays like :math:`e^{-\varepsilon t}` times a polynomial, the true rate;
    near the centre it behaves like the Gaussian bound :math:`e^{-t^2/(2\,\mathrm{Var}\,Z)}`.
    [A26] Thm 8 bounds the same tail; we derive ours from the exact moment generating
    function (above) and test it against the exact tail :func:`dot_sf`.

    Examples
    --------
    >>> t = 3.0
    >>> bool(dot_sf(t, 50, 10.0) <= dot_tail_bound(t, 50, 10.0) < 1)
    True
    """
    n = _dim(n)
    epsilon = check_real("epsilon", epsilon, gt=0)
    tt = np.asarray(t, dtype=np.float64)
    m = n + 1.0
    s = np.maximum(tt * epsilon, 1e-300)
    ell = 2.0 * s / (np.sqrt(m * m + 4.0 * s * s) + m)  # = (sqrt(m^2 + 4 s^2) - m) / (2 s)
    logb = -ell * s - (m / 2.0) * np.log1p(-ell * ell)
    out = np.where(tt > 0, np.minimum(np.exp(logb), 1.0), 1.0)
    return float(out) if out.ndim == 0 else out
