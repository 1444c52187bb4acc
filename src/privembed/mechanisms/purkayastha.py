"""Purkayastha (directional) mechanism on the unit sphere.

References
----------
.. [D23] Du, Yue, Chow, Wang, Huang, Sun (2023). Sanitizing sentence embeddings (and labels) for
   local differential privacy. WWW. (The "PurMech" baseline of [T26].)
.. [T26] Tsai et al. (2026), Table 11 (the reference code integrates numerically per row).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from ..core import theory
from ..core._validation import DataError, check_int, check_real
from ..core.accounting import Guarantee, MetricDP, PureDP
from ..core.rng import NoiseSource
from .base import Mechanism

__all__ = ["AngleTable", "PurkayasthaMechanism", "purkayastha_angle_table"]

#: nats below the mode outside which the table drops mass (e^-60 ~ 1e-26 of the total)
_TAIL_NATS = 60.0
#: the table stops this far short of pi (d > 2): below it float64 cannot resolve the cells, and
#: the density there, proportional to (pi - theta)^(d-2), holds less than 1e-20 of the mass
_PI_MARGIN = 1e-10


class AngleTable:
    r"""Inverse-CDF sampler for :math:`f(\theta) \propto e^{-\varepsilon\theta}\sin^{d-2}\theta` on [0, pi].

    The log-density :math:`g(\theta) = -\varepsilon\theta + (d-2)\log\sin\theta` is concave. The
    table's *core* covers the interval where g is within ``_TAIL_NATS`` nats of its maximum with
    ``cells`` cells; a *tail* of another ``cells`` cells continues it to pi (``_PI_MARGIN`` short
    of pi for d > 2, where the density vanishes). The tail holds less than ~1e-20 of the mass,
    but it must be there: a table that stopped short of pi would let the antipode of an input
    produce outputs that this input never does, and pure LDP would fail outright (found by the
    white-box audit, ``privembed.audit``). Inside a cell g is replaced by its chord, so the
    density is exactly exponential there and both the cell mass and the inverse CDF are closed
    forms. (Cells whose mass underflows float64 get none: see docs/security.md on what a
    floating-point sampler cannot draw.)

    Because g is concave the chord lies below it, by at most :math:`h^2 \max|g''|/8` nats on a
    cell of width h, with :math:`|g''| = (d-2)/\sin^2\theta`. For d = 2 g is linear and the table is
    exact (equal cells). For d > 2 the cells have equal width in :math:`u = \log\tan(\theta/2)`,
    i.e. :math:`h \approx \sin\theta\,\Delta u`, so the bound is about :math:`(d-2)\Delta u^2/8`
    on *every* cell, including those next to the poles of :math:`\log\sin` at 0 and pi (equal
    cells in theta would make it unbounded there). ``max_log_error`` is the largest per-cell
    bound; it bounds the relative error of the sampled density, hence the CDF error by
    ``expm1(max_log_error)``. With the default 16384 cells it is below 1e-5 nats for every
    (epsilon, d) from d = 2 to thousands and epsilon up to 1e4 (worst at d = 3, about 4e-6).
    The tail's cells are coarser (``max_log_error_tail``, up to ~1e-3 nats at d in the
    thousands): they hold less than 1e-20 of the mass, and the error adds at most twice that
    to the privacy loss bound of outputs there.

    Examples
    --------
    >>> t = AngleTable(10.0, 3)
    >>> t.max_log_error < 1e-5
    True
    >>> t.cdf_at(np.array([0.0, math.pi])).tolist()
    [0.0, 1.0]
    """

    def __init__(self, epsilon: float, d: int, cells: int = 16384) -> None:
        self.epsilon = float(epsilon)
        self.d = int(d)
        lo, hi = self._support()
        end = math.pi if self.d == 2 else math.pi - _PI_MARGIN
        if self.d == 2:
            core = np.linspace(lo, hi, cells + 1)
            tail = np.linspace(hi, end, cells + 1) if hi < end else core[-1:]
        else:
            core = self._log_tan_cells(lo, hi, cells)
            tail = self._log_tan_cells(hi, end, cells) if hi < end else core[-1:]
        # core: within _TAIL_NATS of the mode; tail: on to pi, so that no input's table stops
        # short of an angle another input's table reaches (a cut there breaks pure LDP)
        edges = np.concatenate([core, tail[1:]])
        self.core_cells = cells
        self.edges = edges
        g = self.log_density(edges)
        widths = np.diff(edges)
        slope = np.diff(g) / widths
        ga = g[:-1]
        gmax = float(g.max())
        sh = slope * widths
        # cell mass of exp(ga + s (t - a)) on [a, a + h], relative to exp(gmax)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            factor = np.where(np.abs(sh) < 1e-12, widths, np.expm1(sh) / slope)
        mass = np.exp(ga - gmax) * factor
        mass = np.where(np.isfinite(mass) & (mass > 0), mass, 0.0)
        self.slope = slope
        self.widths = widths
        self.cdf = np.concatenate([[0.0], np.cumsum(mass)])
        self.cdf /= self.cdf[-1]
        if self.d > 2:
            # sin is concave on [0, pi]: its minimum over a cell is at one of the ends
            sin_min = np.minimum(np.sin(edges[:-1]), np.sin(edges[1:]))
            err = widths**2 * (self.d - 2) / sin_min**2 / 8.0
            self.max_log_error = float(np.max(err[:cells]))
            self.max_log_error_tail = float(np.max(err[cells:])) if err.size > cells else 0.0
        else:
            self.max_log_error = self.max_log_error_tail = 0.0

    @staticmethod
    def _log_tan_cells(a: float, b: float, cells: int) -> NDArray[np.float64]:
        """Cell edges on [a, b] equally spaced in u = log tan(theta / 2) (ends exact)."""
        u = np.linspace(math.log(math.tan(a / 2)), math.log(math.tan(b / 2)), cells + 1)
        edges = 2.0 * np.arctan(np.exp(u))
        edges[0], edges[-1] = a, b
        return edges

    def log_density(self, theta: NDArray[np.float64]) -> NDArray[np.float64]:
        """Unnormalised log-density g(theta)."""
        theta = np.asarray(theta, dtype=np.float64)
        if self.d == 2:  # no sin factor (and no 0 * log 0 at theta = 0)
            return -self.epsilon * theta
        with np.errstate(divide="ignore"):
            return -self.epsilon * theta + (self.d - 2) * np.log(np.sin(theta))

    def _support(self) -> tuple[float, float]:
        if self.d == 2:  # pure exponential on [0, pi]
            return 0.0, min(math.pi, _TAIL_NATS / self.epsilon)
        mode = math.atan2(self.d - 2, self.epsilon)
        floor = float(self.log_density(np.array([mode]))[0]) - _TAIL_NATS

        def excess(t: float) -> float:
            return float(self.log_density(np.array([t]))[0]) - floor

        def solve(a: float, b: float) -> float:
            # excess(a) < 0 <= excess(b): bisection on a monotone branch of g
            fa = excess(a)
            for _ in range(200):
                m = 0.5 * (a + b)
                fm = excess(m)
                if (fm > 0) == (fa > 0):
                    a, fa = m, fm
                else:
                    b = m
            return 0.5 * (a + b)

        tiny = 1e-300  # g(tiny) < floor always for d > 2
        lo = solve(tiny, mode)
        end = math.pi - _PI_MARGIN
        hi = solve(end, mode) if excess(end) < 0 else end
        return lo, hi

    def sample(self, u_cell: NDArray[np.float64], u_in: NDArray[np.float64]) -> NDArray[np.float64]:
        """Map two independent uniform arrays to angles."""
        idx = np.searchsorted(self.cdf, u_cell, side="right") - 1
        idx = np.clip(idx, 0, self.cdf.size - 2)
        # position inside the cell by the cell-local CDF of an exponential density
        s = self.slope[idx]
        h = self.widths[idx]
        sh = s * h
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            local = np.where(
                np.abs(sh) < 1e-12,
                u_in * h,
                np.log1p(u_in * np.expm1(sh)) / s,
            )
            # guard extreme positive slopes: log1p(u*expm1(sh)) = sh + log(u + (1-u) e^-sh)
            big = sh > 700
            if big.any():
                local[big] = (sh[big] + np.log(u_in[big] + (1 - u_in[big]) * np.exp(-sh[big]))) / s[
                    big
                ]
        return np.clip(self.edges[idx] + local, 0.0, math.pi)

    def cdf_at(self, theta: NDArray[np.float64]) -> NDArray[np.float64]:
        """CDF of the sampler's (piecewise-exponential) law, for diagnostics."""
        t = np.clip(np.asarray(theta, dtype=np.float64), self.edges[0], self.edges[-1])
        idx = np.clip(np.searchsorted(self.edges, t, side="right") - 1, 0, self.slope.size - 1)
        x = t - self.edges[idx]
        s = self.slope[idx]
        h = self.widths[idx]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            frac = np.where(np.abs(s * h) < 1e-12, x / h, np.expm1(s * x) / np.expm1(s * h))
        return self.cdf[idx] + frac * (self.cdf[idx + 1] - self.cdf[idx])


@lru_cache(maxsize=32)
def purkayastha_angle_table(epsilon: float, d: int) -> AngleTable:
    """Cached :class:`AngleTable` for (epsilon, d)."""
    return AngleTable(epsilon, d)


class PurkayasthaMechanism(Mechanism):
    r"""Purkayastha mechanism ([D23]): a random point on the sphere at angle theta from the input.

    :math:`\theta` has density :math:`\propto e^{-\varepsilon\theta}\sin^{d-2}\theta` on
    :math:`[0, \pi]` and the direction is uniform in the tangent space at x, so the output
    density on :math:`S^{d-1}` is :math:`\propto e^{-\varepsilon\angle(x, y)}`. By the triangle
    inequality of the great-circle distance this is epsilon-d_X private for the angular metric,
    hence pure :math:`\pi\varepsilon`-LDP on unit vectors (angles are at most pi).

    Inputs are always normalised (the mechanism is defined on the sphere); outputs are unit
    vectors.

    Sampling is vectorised: angles come from :class:`AngleTable`, an inverse-CDF table built once
    per (epsilon, d) whose relative density error is bounded by ``table.max_log_error`` (below
    1e-5 nats for d >= 2 and epsilon up to 1e4) -- not per-row numerical integration.

    Examples
    --------
    >>> m = PurkayasthaMechanism(epsilon=50.0)
    >>> Y = m.privatize(np.eye(8), rng=1)
    >>> np.allclose(np.linalg.norm(Y, axis=1), 1.0)
    True
    >>> m.guarantee.implied[0].epsilon == 50.0 * np.pi
    True
    """

    name = "purkayastha"
    allowed_input_norms = ("normalize",)
    unit_outputs = True

    def __init__(
        self, *, epsilon: float, input_norm: str = "normalize", renormalize: bool = True
    ) -> None:
        self.epsilon = check_real("epsilon", epsilon, gt=0)
        self._init_common(input_norm, renormalize)

    def check_dim(self, d: int) -> None:
        if d < 2:
            raise DataError(f"the Purkayastha mechanism needs dimension >= 2, got {d}.")

    def angle_table(self, d: int) -> AngleTable:
        """The inverse-CDF table used for dimension ``d``."""
        return purkayastha_angle_table(self.epsilon, check_int("d", d, ge=2))

    def expected_cosine(self, d: int) -> float:
        """E[cos theta] = E[cos(x, output)]."""
        return theory.expected_cosine_purkayastha(self.epsilon, d)

    @property
    def guarantee(self) -> Guarantee:
        return MetricDP(
            self.epsilon,
            metric="angular (great-circle distance, radians)",
            implied=(PureDP(math.pi * self.epsilon, neighbouring="any two unit vectors"),),
        )

    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        n, d = X.shape
        u = source.uniform(n, 2)
        theta = self.angle_table(d).sample(u[:, 0], u[:, 1])
        v = source.normal(n, d)
        v -= np.einsum("ij,ij->i", v, X)[:, None] * X  # tangent component
        norms = np.sqrt(np.einsum("ij,ij->i", v, v))
        v *= (np.sin(theta) / np.where(norms > 0, norms, 1.0))[:, None]
        v += np.cos(theta)[:, None] * X
        return v
