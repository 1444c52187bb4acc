"""Immutable audit records (``to_dict`` gives JSON-safe output)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RESOLUTION",
    "VERDICTS",
    "AuditResult",
    "Estimate",
    "LawTest",
    "ParameterCheck",
    "WhiteBoxResult",
]

#: the verdicts of an audit and of a white-box check
VERDICTS = ("consistent", "violation", "inconclusive")
#: default resolution: "consistent" bounds the privacy the noise gives by 1.25 x the claim
RESOLUTION = 1.25


def _json(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return v.to_dict() if hasattr(v, "to_dict") else dataclasses.asdict(v)
    if isinstance(v, tuple | list):
        return [_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else "nan")
    return v


@dataclass(frozen=True)
class Estimate:
    """A parameter of the noise law estimated from samples, with a confidence interval."""

    name: str
    value: float
    low: float | None = None
    high: float | None = None
    claimed: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def text(self) -> str:
        s = f"{self.name} {self.value:.5g}"
        if self.low is not None and self.high is not None:
            s += f" [{self.low:.5g}, {self.high:.5g}]"
        if self.claimed is not None:
            s += f" (claimed {self.claimed:.5g})"
        return s


@dataclass(frozen=True)
class LawTest:
    """A goodness-of-fit test of the noise law (fails when ``pvalue < threshold``)."""

    name: str
    statistic: float
    pvalue: float
    threshold: float

    @property
    def passed(self) -> bool:
        return bool(self.pvalue >= self.threshold)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["passed"] = self.passed
        return out


@dataclass(frozen=True)
class ParameterCheck:
    """A value the mechanism uses, against the same value recomputed from its constructor
    parameters and first principles (fails when ``deviation > tolerance``).

    ``recomputed`` and ``used`` are the two values where they are numbers or names; for arrays
    and laws (a covariance diagonal, an angle table) they are ``None`` and ``deviation`` says by
    how much they differ (largest relative difference, largest CDF difference).
    """

    name: str
    recomputed: float | str | None
    used: float | str | None
    deviation: float
    tolerance: float
    detail: str

    @property
    def passed(self) -> bool:
        return bool(self.deviation <= self.tolerance)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["passed"] = self.passed
        return out

    def text(self) -> str:
        return f"{self.detail} ({'ok' if self.passed else 'FAIL'})"


@dataclass(frozen=True)
class WhiteBoxResult:
    """The white-box check: the noise law's parameters estimated from samples, and what they imply.

    Attributes
    ----------
    family : str
        The law checked ("gaussian", "l2 laplace", "mahalanobis", "purkayastha angle").
    samples : int
        Noise draws used.
    level : float
        Two-sided confidence level of the intervals; goodness-of-fit tests fail below
        ``1 - level``.
    estimates : tuple of Estimate
    tests : tuple of LawTest
    epsilon_estimate : float
        The epsilon (claim's units; at the claimed delta for (epsilon, delta) claims) that the
        estimated law gives.
    epsilon_low : float
        The smallest such epsilon consistent with the samples at ``level``: a violation is
        declared when this, the value most favourable to the mechanism, exceeds the claim.
        ``inf`` when the estimated law has unbounded privacy loss.
    delta_at_claim : float or None
        (epsilon, delta) claims: the delta the estimated law (at the favourable end of its
        interval) gives at the claimed epsilon.
    verdict : {"consistent", "violation", "inconclusive"}
        "violation": a recomputed parameter disagrees with the mechanism, a goodness-of-fit
        test fails, or ``epsilon_low`` exceeds the claim. Otherwise "consistent" when
        ``epsilon_high <= resolution * claim`` (the samples bound the privacy the noise gives
        within the resolution), else "inconclusive".
    reason : str
    epsilon_high : float
        The largest epsilon consistent with the samples at ``level`` (the end of the interval
        least favourable to the mechanism).
    resolution : float
        The factor of the claim that ``epsilon_high`` must stay within for "consistent".
    samples_needed : float or None
        "inconclusive": about how many noise draws would bring ``epsilon_high`` within the
        resolution for a mechanism at its claim (the interval's width scaled as 1/sqrt(n),
        with two standard errors to spare).
    checks : tuple of ParameterCheck
        What the mechanism uses (sensitivity, sigma, Sigma, angle table, the claim itself)
        against the same recomputed here from its constructor parameters.
    """

    family: str
    samples: int
    level: float
    estimates: tuple[Estimate, ...]
    tests: tuple[LawTest, ...]
    epsilon_estimate: float
    epsilon_low: float
    delta_at_claim: float | None
    verdict: str
    reason: str
    epsilon_high: float = math.inf
    resolution: float = RESOLUTION
    samples_needed: float | None = None
    checks: tuple[ParameterCheck, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class AuditResult:
    """Result of :func:`privembed.audit.audit`.

    Epsilons are in the claim's units: per unit of the metric for metric (d_X) privacy (the
    pair's bound divided by its distance), plain epsilon otherwise.

    Attributes
    ----------
    mechanism : dict
        ``Mechanism.config`` of the audited mechanism.
    guarantee : str
        The claim, as the mechanism describes it.
    claim_kind : {"approx_dp", "pure_dp", "metric_dp"}
    claimed_epsilon, delta : float
        The claimed epsilon and the delta the bound is computed at (0 for pure and metric DP).
    metric : str or None
        The metric of a metric-DP claim.
    dim : int
        Input dimension.
    distance : float
        Distance between the pair in the claim's metric (the l2 distance for LDP claims).
    pair : str
        How the pair was built.
    score : str
        "lr" (the claimed law's likelihood-ratio statistic) or a classifier name.
    samples, test_samples : int
        Draws per side in all, and in the split that gives the reported bound.
    threshold : float
    flipped : bool
        The test says "x1" when the score is *below* the threshold.
    false_positives, false_negatives : int
        Errors of the test on the test split.
    fpr_upper, fnr_upper : float
        Their one-sided Clopper-Pearson upper bounds (each at ``(1 - confidence)/2``).
    pair_epsilon_lower : float
        The bound for the pair (for metric DP: before dividing by ``distance``).
    epsilon_lower : float
        The audited lower bound, in the claim's units; holds with probability ``confidence``.
    confidence : float
    ceiling : float
        The largest bound ``test_samples`` draws can certify (claim's units).
    verdict : {"consistent", "violation", "inconclusive"}
        "violation": the sampling bound exceeds the claim or the white box found one.
        "inconclusive": no violation, but the claim is above ``ceiling`` (no audit of this N
        can refute or confirm it), or neither the white box (off, or its interval wider than
        ``resolution`` x the claim) nor the sampling power (the expected bound of a correct
        mechanism at this N below claim / ``resolution``) resolves it. Otherwise "consistent".
    reason : str
        Why, in one sentence or two.
    resolution : float
        See ``verdict``.
    needed_samples : float or None
        "inconclusive": draws per side that would let the sampling audit decide (the ceiling
        reaching the claim, or an expected bound of claim / ``resolution``); ``inf`` when no N
        can (the release is more private than claimed for this pair); ``None`` when it cannot
        be computed (classifier scores, no exact law) -- then see ``whitebox.samples_needed``.
    noise : {"seeded", "fresh", "keyed"}
        The randomness path that was audited: ``privatize`` with seeded streams or fresh
        entropy, or the keyed release path (:class:`privembed.release.Release` with a key).
    generator : {"philox", "aes"} or None
        The counter-based generator of keyed noise.
    samples_needed : float or None
        Draws per side for an *expected* bound of half the claim (``power=True``); ``inf`` when
        beyond ~1e26.
    samples_needed_exact : bool or None
        False when computed from the law before renormalisation (then a lower bound).
    epsilon_exact : float or None
        ``power=True``: what the score's exact law gives for this pair with no sampling error
        (claim's units) -- the most any audit with this pair and score approaches. Below half
        the claim, ``samples_needed`` is ``inf``: the release is more private than claimed for
        this pair (e.g. renormalised Gaussian noise at d = 2).
    whitebox : WhiteBoxResult or None
    seconds : float
    """

    mechanism: dict[str, Any]
    guarantee: str
    claim_kind: str
    claimed_epsilon: float
    delta: float
    metric: str | None
    dim: int
    distance: float
    pair: str
    score: str
    samples: int
    test_samples: int
    threshold: float
    flipped: bool
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    pair_epsilon_lower: float
    epsilon_lower: float
    confidence: float
    ceiling: float
    verdict: str
    reason: str
    resolution: float = RESOLUTION
    needed_samples: float | None = None
    noise: str = "seeded"
    generator: str | None = None
    samples_needed: float | None = None
    samples_needed_exact: bool | None = None
    epsilon_exact: float | None = None
    whitebox: WhiteBoxResult | None = None
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def sampling_violation(self) -> bool:
        """The audited lower bound exceeds the claim."""
        return bool(self.epsilon_lower > self.claimed_epsilon)

    @property
    def ratio(self) -> float:
        """Audited lower bound / claim (1 would be a tight audit)."""
        return self.epsilon_lower / self.claimed_epsilon if self.claimed_epsilon > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["sampling_violation"] = self.sampling_violation
        out["ratio"] = _json(self.ratio)
        return out
