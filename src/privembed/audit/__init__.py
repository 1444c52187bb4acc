r"""Audit the guarantees themselves: empirical lower bounds on epsilon, and a white-box check.

A privacy claim is only as good as the code that draws the noise. :func:`audit` runs a
mechanism many times on a pair of neighbouring inputs, lets a distinguisher guess which input
produced each output, and turns its error rates into a lower bound on epsilon that holds with a
stated confidence ([JUO20], [NHSBTJCT23]; [KAB24] for black-box testing of mechanisms). A
correct mechanism yields a bound below its claim; a bound above the claim is a violation.

* **The pair** is the worst case of the claim: antipodal unit vectors for LDP on the sphere,
  the relation's sensitivity for Gaussian noise, the attribute relation of a projection, and
  for metric (d_X) privacy a chosen distance (default: antipodal), the bound then being
  divided by the distance (per unit of the metric).
* **The score** is the likelihood-ratio statistic of the claimed law (the most powerful test
  if the claim is exact), or a learned classifier as the black-box alternative.
* **The threshold** is chosen on a separate split; the reported bound uses one-sided
  Clopper-Pearson upper bounds on the false-positive and false-negative rates, each at level
  ``(1 - confidence)/2``, in
  :math:`\varepsilon \ge \ln\frac{1-\delta-\beta}{\alpha}` (and the same with alpha and
  beta swapped).
* **The white-box check** (:func:`whitebox_check`) estimates the noise law's parameters from
  samples (Gaussian sigma with a chi-square interval, the radius law of the l2 mechanisms,
  Purkayastha's angle law), tests the law's shape, and computes the privacy curve from the
  estimates.

What an audit cannot show
-------------------------
* **The ln N ceiling.** With N test draws per side no audit certifies more than
  :func:`max_certifiable_epsilon` -- about :math:`\ln(N/\ln(2/(1-c)))` at confidence c: 11.8
  for 5e5 test draws, 12.5 for 1e6, 19.4 for 1e9. Larger claims (the classic Gaussian sigma
  presented as (50, 1e-5)-LDP, whose real delta is 0.586) need the white-box check.
* **Rare regions.** A bound needs the distinguishing event to happen often enough to be
  counted. In high dimension the privacy loss of the l2 mechanisms is concentrated far below
  its worst case (it is reached only when the noise points along x1 - x0), so a sampling
  audit at d = 384 certifies little even for a correct mechanism; ``power=True`` /
  :func:`samples_needed` computes the N that would be needed. Bugs that live where the noise is
  small (a Laplace radius with Gamma shape d - 1 makes the loss unbounded near the input) are
  visited most of the time at d = 2 and almost never at d = 384: audit small dimensions too.
* **Code paths the sampler never takes**: keyed sources, other bit generators, float32 inputs,
  other blocks of a batch; each needs its own audit.
* **Floating-point side channels**: outputs are float64 samples of a continuous law; the
  low-order bits of a float sampler can leak the input (Mironov 2012) and no statistical test
  at these sample sizes sees that.

References
----------
.. [JUO20] Jagielski, Ullman, Oprea (2020). Auditing differentially private machine learning:
   how private is private SGD? NeurIPS.
.. [NHSBTJCT23] Nasr et al. (2023). Tight auditing of differentially private machine learning.
   USENIX Security. (Also Nasr et al. 2021, Adversary instantiation, IEEE S&P.)
.. [KAB24] Kong et al. (2024). DP-Auditorium: a large-scale library for auditing differential
   privacy. IEEE S&P.
.. [M12] Mironov (2012). On significance of the least significant bits for differential
   privacy. CCS.

Examples
--------
>>> from privembed import get_mechanism
>>> r = audit(get_mechanism("purkayastha", epsilon=1.0), dim=2, samples=20_000, rng=0)
>>> r.verdict, r.whitebox.verdict
('consistent', 'consistent')
>>> round(max_certifiable_epsilon(10**6 // 2), 1)
11.8
"""

from __future__ import annotations

from ._bounds import ScoreLaw, cp_upper, epsilon_lower_bound, max_certifiable_epsilon
from ._core import (
    RESOLUTION,
    audit,
    ceiling_samples,
    features,
    mechanism_from_config,
    samples_needed,
    whitebox_check,
)
from ._families import AUDITORS, AngleLaw, Family, auditor_for, register_auditor
from ._paths import NoisePath
from ._results import VERDICTS, AuditResult, Estimate, LawTest, ParameterCheck, WhiteBoxResult

__all__ = [
    "AUDITORS",
    "RESOLUTION",
    "VERDICTS",
    "AngleLaw",
    "AuditResult",
    "Estimate",
    "Family",
    "LawTest",
    "NoisePath",
    "ParameterCheck",
    "ScoreLaw",
    "WhiteBoxResult",
    "audit",
    "auditor_for",
    "ceiling_samples",
    "cp_upper",
    "epsilon_lower_bound",
    "features",
    "max_certifiable_epsilon",
    "mechanism_from_config",
    "register_auditor",
    "samples_needed",
    "whitebox_check",
]
