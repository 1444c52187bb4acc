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
* **The white-box check** (:func:`whitebox_check`) first holds the mechanism to its own
  parameters: its sensitivity, sigma, Sigma, angle table and the claim itself are recomputed
  from the constructor parameters and first principles (``dp_accounting`` for the Gaussian
  calibration; never the attribute under check) and compared with what it uses. It then
  estimates the noise law's parameters from samples (Gaussian sigma with a chi-square
  interval, the radius law of the l2 mechanisms, Purkayastha's angle law), tests the law's
  shape, and computes the privacy curve from the estimates.
* **The randomness path** is chosen with ``noise``: seeded streams, fresh entropy, or the keyed
  release path (:class:`privembed.release.Release` with a key and one record id per draw,
  Philox or AES): a bug on one path is invisible on the others.

Verdicts
--------
Every audit ends in one of three verdicts (:data:`VERDICTS`), with its reason:

* **violation** -- the sampling bound exceeds the claim, or the white box found a mismatch with
  the parameters, a failed goodness-of-fit test, or an estimate beyond the claim even at the
  end of its interval most favourable to the mechanism;
* **inconclusive** -- no violation, but the claim is above the ceiling of the test draws, or
  neither the white box (off, or its epsilon interval reaching past ``resolution`` x the claim)
  nor the sampling power (a correct mechanism's expected bound at this N short of claim /
  ``resolution``, from the exact law of the score) resolves the claim; ``needed_samples`` and
  ``whitebox.samples_needed`` say how many draws would decide;
* **consistent** -- otherwise: no violation, and the privacy the sampled noise law gives is
  bounded by ``resolution`` (default 1.25) x the claim at the white box's level (within its
  model), or the sampling audit could have seen a violation of that size.

What an audit cannot show
-------------------------
* **The ln N ceiling.** With N test draws per side no audit certifies more than
  :func:`max_certifiable_epsilon` -- about :math:`\ln(N/\ln(2/(1-c)))` at confidence c: 11.8
  for 5e5 test draws, 12.5 for 1e6, 19.4 for 1e9 (:func:`ceiling_samples` inverts it). Larger
  claims read *inconclusive* whatever the white box finds; the white box can still show them
  violated (the classic Gaussian sigma presented as (50, 1e-5)-LDP, whose real delta is 0.586).
* **Rare regions.** A bound needs the distinguishing event to happen often enough to be
  counted. In high dimension the privacy loss of the l2 mechanisms is concentrated far below
  its worst case (it is reached only when the noise points along x1 - x0), so a sampling
  audit at d = 384 certifies little even for a correct mechanism; ``power=True`` /
  :func:`samples_needed` computes the N that would be needed. Bugs that live where the noise is
  small (a Laplace radius with Gamma shape d - 1 makes the loss unbounded near the input) are
  visited most of the time at d = 2 and almost never at d = 384: audit small dimensions too.
  The white box's "consistent" bounds epsilon through the law's scale only: a shape bug whose
  scale shift is inside the interval (0.26% at d = 384 for shape d - 1) reads consistent.
* **Code paths the sampler never takes**: other bit generators, float32 inputs, other blocks
  of a batch, text-content keyed tags (the keyed audit binds vector contents); each needs its
  own audit.
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
>>> audit(get_mechanism("purkayastha", epsilon=1.0), dim=2, samples=20_000, noise="keyed",
...       rng=0).verdict
'consistent'
>>> round(max_certifiable_epsilon(10**6 // 2), 1)
11.8
"""

from __future__ import annotations

from ._bounds import ScoreLaw, cp_upper, epsilon_lower_bound, max_certifiable_epsilon
from ._core import (
    audit,
    ceiling_samples,
    features,
    mechanism_from_config,
    samples_needed,
    whitebox_check,
)
from ._families import AUDITORS, AngleLaw, Family, auditor_for, register_auditor
from ._paths import NoisePath
from ._results import (
    RESOLUTION,
    VERDICTS,
    AuditResult,
    Estimate,
    LawTest,
    ParameterCheck,
    WhiteBoxResult,
)

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
