"""Gaussian noise on unit embeddings: calibrated local DP and [K26]'s empirical noise.

References
----------
.. [K26] Kaliutau (2026). Privacy-utility trade-off analysis for 1920-dimensional clinical vectors.
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ..core import theory
from ..core._validation import check_choice, check_real
from ..core.accounting import ApproxDP, Guarantee, Neighbouring
from ..core.rng import NoiseSource
from .base import Mechanism

__all__ = ["EmpiricalGaussianMechanism", "GaussianMechanism", "gaussian_guarantee"]


class Calibrated(Protocol):
    """What :func:`gaussian_guarantee` reads from a Gaussian mechanism: its requested (epsilon,
    delta) and its calibration (``"analytic"`` or ``"classic"``)."""

    epsilon: float
    delta: Any
    calibration: str


def gaussian_guarantee(
    m: Calibrated,
    noise_multiplier: float,
    neighbouring: str,
    relation: Neighbouring,
    context: str = "",
) -> ApproxDP:
    """The (epsilon, delta)-DP of ``m``'s Gaussian noise: sigma = ``noise_multiplier`` times the
    l2 sensitivity of what it is added to.

    The analytic calibration achieves the requested delta exactly. For the classic one the
    delta that the noise really achieves at epsilon ([BW18] Thm 8: it depends on the noise
    multiplier only) is reported: the requested one when it holds, else the achieved one
    (capped at 1; the classic sigma under-noises above epsilon = 1), with the true epsilon at
    the requested delta in the note. Every Gaussian noise law (full dimension, after a public
    projection, in a private subspace) states its guarantee here; ``context`` ends the note
    (what the noise is added to).

    Examples
    --------
    >>> m = GaussianMechanism(epsilon=50.0, delta=1e-5, calibration="classic")
    >>> g = gaussian_guarantee(m, m.sigma / 2.0, "any two unit vectors", Neighbouring.RECORD)
    >>> round(g.delta, 2), g.noise_multiplier == m.sigma / 2.0
    (0.59, True)
    """
    epsilon, delta, nm = m.epsilon, float(m.delta), noise_multiplier
    tail = f"; {context}" if context else ""
    reported = delta
    if m.calibration == "analytic":
        note = "analytic Gaussian calibration (Balle & Wang 2018)"
    else:
        achieved = theory.analytic_gaussian_delta(nm, epsilon, 1.0)
        if achieved <= delta:
            note = (
                f"classic calibration; exact delta at this epsilon is {achieved:.3g} "
                f"(requested {delta:.3g})"
            )
        else:
            eps_at_delta = theory.analytic_gaussian_epsilon(nm, delta, 1.0)
            reported = min(1.0, achieved)
            note = (
                f"classic calibration under-noises: requested delta={delta:.3g} but the "
                f"exact delta at epsilon={epsilon:g} is {achieved:.3g}; at delta="
                f"{delta:.3g} the true epsilon is {eps_at_delta:.4g}"
            )
    return ApproxDP(
        epsilon, reported, neighbouring=neighbouring, note=note + tail, relation=relation,
        noise_multiplier=nm,
    )  # fmt: skip


class _IsotropicGaussian(Mechanism):
    sigma: float

    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        noise = source.normal(X.shape[0], X.shape[1])
        noise *= self.sigma
        noise += X
        return noise

    @property
    def noise_scale(self) -> float:
        """Per-coordinate standard deviation of the noise (= ``sigma``)."""
        return self.sigma

    @property
    def variance(self) -> float:
        """Per-coordinate variance ``sigma**2``."""
        return self.sigma**2

    def expected_noise_norm(self, d: int) -> float:
        """E|Z| = sigma * sqrt(2) * Gamma((d+1)/2) / Gamma(d/2)."""
        return float(
            self.sigma
            * math.sqrt(2.0)
            * math.exp(math.lgamma((d + 1) / 2.0) - math.lgamma(d / 2.0))
        )

    def expected_cosine(self, d: int, *, exact: bool = True) -> float:
        """E[cos(x, output)] for a unit input in dimension ``d``.

        ``exact=False`` gives [K26]'s closed form ``1/sqrt(1 + d sigma^2)``.
        """
        if exact:
            return theory.expected_cosine_gaussian(self.sigma, d)
        return theory.expected_cosine_gaussian_approx(self.sigma, d)


class GaussianMechanism(_IsotropicGaussian):
    r"""Gaussian local DP on the unit sphere ([K26] §2).

    Each input is scaled to unit length (``input_norm="normalize"``, the default) or clipped into
    the unit ball (``"clip"``); any two such inputs are at l2 distance at most 2, the default
    ``sensitivity``. The release is :math:`y = x + \mathcal N(0, \sigma^2 I_d)`, optionally
    renormalised to unit length (post-processing).

    Parameters
    ----------
    epsilon : float, > 0
    delta : float, in (0, 1)
    calibration : {"analytic", "classic"}
        ``"analytic"`` (default): the smallest sigma with exact (epsilon, delta) ([BW18]).
        ``"classic"``: :math:`\sigma = \Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon`, kept to
        reproduce [K26]. It is a valid bound only for epsilon < 1; :attr:`guarantee` reports the
        delta it really achieves at ``epsilon`` (larger than requested when it under-noises).
    sensitivity : float, > 0
        l2 sensitivity; 2 for the unit sphere. A smaller value gives a guarantee only for inputs
        that are that close, and the guarantee says so.
    input_norm : {"normalize", "clip"}
    renormalize : bool, default True

    Examples
    --------
    >>> round(GaussianMechanism(epsilon=5.0, delta=1e-5, calibration="classic").sigma, 2)
    1.94
    >>> m = GaussianMechanism(epsilon=50.0, delta=1e-5, calibration="classic")
    >>> round(m.guarantee.delta, 2)   # the classic sigma under-noises badly at epsilon = 50
    0.59
    >>> Y = m.privatize(np.eye(3), rng=0); Y.shape
    (3, 3)
    """

    name = "gaussian"
    allowed_input_norms = ("normalize", "clip")

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        calibration: str = "analytic",
        sensitivity: float = 2.0,
        input_norm: str = "normalize",
        renormalize: bool = True,
    ) -> None:
        self.epsilon = check_real("epsilon", epsilon, gt=0)
        self.delta = check_real("delta", delta, gt=0, lt=1)
        self.calibration = check_choice("calibration", calibration, ("analytic", "classic"))
        self.sensitivity = check_real("sensitivity", sensitivity, gt=0)
        self._init_common(input_norm, renormalize)
        if self.calibration == "analytic":
            self.sigma = theory.analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
        else:
            self.sigma = theory.classic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)

    @property
    def achieved_delta(self) -> float:
        """The exact delta that ``sigma`` achieves at ``epsilon`` ([BW18] Thm 8; it depends on
        sigma / sensitivity only, computed as :func:`gaussian_guarantee` does)."""
        return theory.analytic_gaussian_delta(self.sigma / self.sensitivity, self.epsilon, 1.0)

    @property
    def guarantee(self) -> Guarantee:
        rel = (
            "any two unit vectors (l2 sensitivity 2)"
            if self.sensitivity == 2.0
            else f"inputs at l2 distance <= {self.sensitivity:g}"
        )
        return gaussian_guarantee(self, self.sigma / self.sensitivity, rel, self.relation)

    @property
    def relation(self) -> Neighbouring:
        """RECORD when the sensitivity covers any two unit vectors (>= 2), else BOUNDED."""
        return Neighbouring.RECORD if self.sensitivity >= 2.0 else Neighbouring.BOUNDED


class EmpiricalGaussianMechanism(_IsotropicGaussian):
    r"""Fixed-sigma Gaussian noise on unit embeddings ([K26] §2, "empirical noise").

    Chosen for utility, not calibrated to a target epsilon -- but noise of scale sigma on unit
    vectors (l2 sensitivity 2) *does* give a guarantee: :attr:`guarantee` reports the exact
    epsilon it implies at ``report_delta`` ([BW18]). For sigma = 0.2 that is about 91.8 at
    delta = 1e-5, i.e. essentially no protection against a worst-case adversary.

    Parameters
    ----------
    sigma : float, > 0
    report_delta : float, in (0, 1), default 1e-5
    input_norm : {"normalize", "clip"}
    renormalize : bool, default True

    Examples
    --------
    >>> m = EmpiricalGaussianMechanism(sigma=0.2)
    >>> round(m.expected_cosine(1920, exact=False), 3)
    0.113
    >>> round(m.guarantee.epsilon, 1)
    91.8
    """

    name = "empirical"
    privacy_parameter = "sigma"
    allowed_input_norms = ("normalize", "clip")
    sensitivity = 2.0

    def __init__(
        self,
        *,
        sigma: float,
        report_delta: float = 1e-5,
        input_norm: str = "normalize",
        renormalize: bool = True,
    ) -> None:
        self.sigma = check_real("sigma", sigma, gt=0)
        self.report_delta = check_real("report_delta", report_delta, gt=0, lt=1)
        self._init_common(input_norm, renormalize)

    @property
    def implied_epsilon(self) -> float:
        """Exact epsilon of N(0, sigma^2 I) on unit vectors at ``report_delta``."""
        return theory.analytic_gaussian_epsilon(self.sigma, self.report_delta, self.sensitivity)

    @property
    def guarantee(self) -> Guarantee:
        return ApproxDP(
            self.implied_epsilon,
            self.report_delta,
            neighbouring="any two unit vectors (l2 sensitivity 2)",
            note=f"sigma={self.sigma:g} chosen empirically; epsilon implied at delta="
            f"{self.report_delta:g}",
            relation=Neighbouring.RECORD,
            noise_multiplier=self.sigma / self.sensitivity,
        )
