r"""From a threshold test's error counts to an epsilon lower bound, and what N can certify.

A test that says "x1" when a score is at least t has, on N draws from each side, ``fp`` false
positives (draws from x0 it called x1) and ``fn`` false negatives. For an
(epsilon, delta)-DP mechanism every event S obeys :math:`P_1(S) \le e^\varepsilon P_0(S) +
\delta` and the same with 0 and 1 swapped, so with :math:`\alpha = P_0(s \ge t)` and
:math:`\beta = P_1(s < t)`

.. math::
    \varepsilon \ge \max\left(\ln\frac{1 - \delta - \beta}{\alpha},
    \ln\frac{1 - \delta - \alpha}{\beta}\right).

Replacing alpha and beta by one-sided Clopper-Pearson upper bounds, each at level
``(1 - confidence) / 2``, makes the bound hold with probability at least ``confidence``
([JUO20], [NHSBTJCT23]). With both counts zero the bound is the *ceiling*: about
:math:`\ln(N / \ln(2/(1-\text{confidence})))`, e.g. 11.8 for N = 5e5 test draws per side at 95%.

References
----------
.. [JUO20] Jagielski, Ullman, Oprea (2020). Auditing differentially private machine learning:
   how private is private SGD? NeurIPS.
.. [NHSBTJCT23] Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini, Terzis (2023). Tight
   auditing of differentially private machine learning. USENIX Security.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from ..core._validation import check_int, check_real

__all__ = [
    "ScoreLaw",
    "cp_lower",
    "cp_upper",
    "epsilon_from_bounds",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "evaluate_threshold",
    "max_certifiable_epsilon",
    "select_threshold",
]

#: above this many trials the Clopper-Pearson bound uses its Poisson limit (the incomplete beta
#: inverse loses accuracy past ~1e15 trials; the two agree to 1e-9 relative at 1e12)
_POISSON_N = 1e12


def _half_alpha(confidence: float) -> float:
    c = check_real("confidence", confidence, gt=0, lt=1)
    return (1.0 - c) / 2.0


def cp_upper(k: Any, n: Any, alpha: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson upper bound at level ``1 - alpha`` on p from k of n.

    Accepts real-valued ``k`` (expected counts, for power calculations) and broadcasts.

    Examples
    --------
    >>> float(cp_upper(0, 1000, 0.025))   # about ln(40) / 1000
    0.0036820838968656...
    """
    k, n = np.broadcast_arrays(np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64))
    q = 1.0 - alpha
    out = np.ones(k.shape)
    full = k >= n
    # counts of millions on both sides: the Wilson score bound (within O(1/k) of Clopper-Pearson;
    # the exact inverses take ~0.02 s per call at such arguments)
    large = ~full & (k > 1e6) & (n - k > 1e6)
    poisson = ~full & ~large & (n > _POISSON_N)
    exact = ~(full | large | poisson)
    with np.errstate(all="ignore"):
        if exact.any():
            out[exact] = special.betaincinv(k[exact] + 1.0, n[exact] - k[exact], q)
        if poisson.any():
            out[poisson] = special.gammaincinv(k[poisson] + 1.0, q) / n[poisson]
        if large.any():
            z = float(special.ndtri(q))
            kk, nn = k[large], n[large]
            p = kk / nn
            c = z * z / nn
            out[large] = (p + c / 2 + z * np.sqrt(p * (1 - p) / nn + c / (4 * nn))) / (1 + c)
    return np.asarray(np.clip(out, 0.0, 1.0), dtype=np.float64)


def cp_lower(k: Any, n: Any, alpha: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson lower bound at level ``1 - alpha`` on p from k of n.

    Exactly ``1 - cp_upper(n - k, n, alpha)``, computed without that subtraction (which loses
    every digit when the bound is tiny).

    Examples
    --------
    >>> float(cp_lower(1000, 1000, 0.025)) == 1 - float(cp_upper(0, 1000, 0.025))
    True
    """
    k, n = np.broadcast_arrays(np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64))
    q = alpha
    out = np.zeros(k.shape)
    pos = k > 0
    large = pos & (k > 1e6) & (n - k > 1e6)
    poisson = pos & ~large & (n > _POISSON_N) & (k < n)
    exact = pos & ~(large | poisson)
    with np.errstate(all="ignore"):
        if exact.any():
            out[exact] = special.betaincinv(k[exact], n[exact] - k[exact] + 1.0, q)
        if poisson.any():
            out[poisson] = special.gammaincinv(k[poisson], q) / n[poisson]
        if large.any():
            out[large] = 1.0 - cp_upper(n[large] - k[large], n[large], alpha)
    return np.asarray(np.clip(out, 0.0, 1.0), dtype=np.float64)


def epsilon_from_bounds(
    fpr_up: Any, fnr_up: Any, tnr_lo: Any, tpr_lo: Any, delta: float
) -> NDArray[np.float64]:
    """Epsilon lower bound from bounds on a test's rates, floored at 0.

    For the event S the test calls "x1": ``fpr_up`` >= P0(S), ``tpr_lo`` <= P1(S),
    ``fnr_up`` >= P1(not S), ``tnr_lo`` <= P0(not S); the bound is
    ``max(ln((tpr_lo - delta) / fpr_up), ln((tnr_lo - delta) / fnr_up))``. The complements
    are passed separately so that tiny ones keep their digits.
    """
    a, b = np.asarray(fpr_up, dtype=np.float64), np.asarray(fnr_up, dtype=np.float64)
    ta, tb = np.asarray(tnr_lo, dtype=np.float64), np.asarray(tpr_lo, dtype=np.float64)
    with np.errstate(all="ignore"):
        one = np.log(np.maximum(tb - delta, 0.0)) - np.log(a)
        two = np.log(np.maximum(ta - delta, 0.0)) - np.log(b)
        out = np.fmax(one, two)
    out = np.where(np.isnan(out), 0.0, out)
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)


def epsilon_from_rates(alpha: Any, beta: Any, delta: float) -> NDArray[np.float64]:
    """The epsilon lower bound implied by error rates alpha (false positive), beta (false negative).

    ``max(ln((1 - delta - beta) / alpha), ln((1 - delta - alpha) / beta))``, floored at 0.
    """
    a = np.asarray(alpha, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    return epsilon_from_bounds(a, b, 1.0 - a, 1.0 - b, delta)


def epsilon_lower_bound(
    false_positives: int,
    n0: int,
    false_negatives: int,
    n1: int,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> float:
    """Epsilon lower bound, holding with probability ``confidence``, from a threshold test's errors.

    Parameters
    ----------
    false_positives, n0 : int
        Draws from x0 that the test attributed to x1, out of ``n0``.
    false_negatives, n1 : int
        Draws from x1 attributed to x0, out of ``n1``.
    delta : float in [0, 1)
    confidence : float in (0, 1)
        Joint level of the two one-sided Clopper-Pearson bounds (each at ``(1 - confidence)/2``).

    Examples
    --------
    >>> round(epsilon_lower_bound(10, 10_000, 5_000, 10_000), 3)
    5.586
    """
    for name, v in (("false_positives", false_positives), ("false_negatives", false_negatives)):
        check_int(name, v, ge=0)
    n0 = check_int("n0", n0, ge=1)
    n1 = check_int("n1", n1, ge=1)
    delta = check_real("delta", delta, ge=0, lt=1)
    a = _half_alpha(confidence)
    fp, fn = false_positives, false_negatives
    return float(
        epsilon_from_bounds(
            cp_upper(fp, n0, a),
            cp_upper(fn, n1, a),
            cp_lower(n0 - fp, n0, a),
            cp_lower(n1 - fn, n1, a),
            delta,
        )
    )


def max_certifiable_epsilon(n: int, *, confidence: float = 0.95, delta: float = 0.0) -> float:
    r"""The largest epsilon any audit with ``n`` test draws per side can certify (the ln N ceiling).

    It is the bound of a perfect test (no errors on either side):
    :math:`\ln((1-\delta-u)/u)` with :math:`u = 1 - (\alpha/2)^{1/n}`, about
    :math:`\ln(n / \ln(2/\alpha))` for :math:`\alpha = 1 - \text{confidence}`.

    Examples
    --------
    >>> round(max_certifiable_epsilon(500_000), 2)
    11.82
    >>> round(max_certifiable_epsilon(10**9), 2)
    19.42
    """
    n = check_int("n", n, ge=1)
    return epsilon_lower_bound(0, n, 0, n, delta=delta, confidence=confidence)


def _eps_counts(fp: Any, n0: Any, fn: Any, n1: Any, alpha: float, delta: float) -> NDArray[Any]:
    return epsilon_from_bounds(
        cp_upper(fp, n0, alpha),
        cp_upper(fn, n1, alpha),
        cp_lower(np.asarray(n0) - fp, n0, alpha),
        cp_lower(np.asarray(n1) - fn, n1, alpha),
        delta,
    )


# ---- threshold selection on one split, evaluation on another ---------------------------------
def _candidates(s0: NDArray[np.float64], s1: NDArray[np.float64], k: int = 4000) -> NDArray[Any]:
    """Candidate thresholds: every tail value of either side, plus evenly spaced pooled quantiles."""
    pooled = np.concatenate([s0, s1])
    if pooled.size <= 4 * k:
        return np.unique(pooled)
    tails = [s0[:k], s0[-k:], s1[:k], s1[-k:]]
    mid = np.sort(pooled)[np.linspace(0, pooled.size - 1, 4 * k).astype(np.int64)]
    return np.unique(np.concatenate([*tails, mid]))


def _bounds_at(
    s0: NDArray[np.float64],
    s1: NDArray[np.float64],
    t: NDArray[np.float64],
    delta: float,
    alpha: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[Any], NDArray[Any]]:
    """Bounds at thresholds ``t`` for the event {s >= t} and its complement (sorted s0, s1)."""
    n0, n1 = s0.size, s1.size
    fp = n0 - np.searchsorted(s0, t, side="left")  # x0 draws scored >= t
    fn = np.searchsorted(s1, t, side="left")  # x1 draws scored < t
    up = _eps_counts(fp, n0, fn, n1, alpha, delta)
    down = _eps_counts(n0 - fp, n0, n1 - fn, n1, alpha, delta)
    return up, down, fp, fn


def select_threshold(
    s0: Any, s1: Any, *, delta: float, confidence: float
) -> tuple[float, bool, float]:
    """Threshold and orientation that maximise the bound on a *selection* split.

    Returns ``(t, flip, bound)``: the test says "x1" when ``s >= t`` (``flip=False``) or when
    ``s < t`` (``flip=True``). The bound on this split is optimistic (the threshold was fitted to
    it); report the bound :func:`evaluate_threshold` gives on an independent split.
    """
    a = np.sort(np.asarray(s0, dtype=np.float64))
    b = np.sort(np.asarray(s1, dtype=np.float64))
    t = _candidates(a, b)
    up, down, _, _ = _bounds_at(a, b, t, delta, _half_alpha(confidence))
    i, j = int(np.argmax(up)), int(np.argmax(down))
    if down[j] > up[i]:
        return float(t[j]), True, float(down[j])
    return float(t[i]), False, float(up[i])


def evaluate_threshold(
    s0: Any, s1: Any, t: float, flip: bool, *, delta: float, confidence: float
) -> dict[str, Any]:
    """Counts, Clopper-Pearson upper bounds and the epsilon bound of one fixed test."""
    a = np.sort(np.asarray(s0, dtype=np.float64))
    b = np.sort(np.asarray(s1, dtype=np.float64))
    n0, n1 = a.size, b.size
    fp = int(n0 - np.searchsorted(a, t, side="left"))
    fn = int(np.searchsorted(b, t, side="left"))
    if flip:
        fp, fn = n0 - fp, n1 - fn
    alpha = _half_alpha(confidence)
    fpr_up = float(cp_upper(fp, n0, alpha))
    fnr_up = float(cp_upper(fn, n1, alpha))
    return {
        "false_positives": fp,
        "false_negatives": fn,
        "n0": n0,
        "n1": n1,
        "fpr_upper": fpr_up,
        "fnr_upper": fnr_up,
        "epsilon": float(_eps_counts(fp, n0, fn, n1, alpha, delta)),
    }


# ---- power: the bound an audit can expect, from the exact law of the score ---------------------
class ScoreLaw:
    """A discretised law of the audit score under x0 and under x1 (for power calculations).

    Each side is a set of score values with log-probabilities (normalised here). ``exact`` is
    False when the law is that of the mechanism *before* post-processing (renormalisation): an
    audit of the post-processed release cannot do better, so sample sizes computed from it are
    lower bounds.

    Parameters
    ----------
    values0, logw0, values1, logw1 : array_like
        Score values and unnormalised log-weights under x0 and under x1.
    exact : bool
    resolution_nats : float
        Mass below ``exp(-resolution_nats)`` is not represented; only events of probability
        above ``exp(-(resolution_nats - margin_nats))`` are used, and sample sizes beyond that
        (1e26 at the default 80 nats) are reported as infinite.
    """

    def __init__(
        self,
        values0: Any,
        logw0: Any,
        values1: Any,
        logw1: Any,
        *,
        exact: bool = True,
        resolution_nats: float = 80.0,
    ) -> None:
        self.exact = bool(exact)
        self.resolution_nats = float(resolution_nats)
        self._side0 = self._prepare(values0, logw0)
        self._side1 = self._prepare(values1, logw1)

    @staticmethod
    def _prepare(
        values: Any, logw: Any
    ) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any], NDArray[Any]]:
        v = np.asarray(values, dtype=np.float64).ravel()
        lw = np.asarray(logw, dtype=np.float64).ravel()
        keep = np.isfinite(v) & np.isfinite(lw)
        v, lw = v[keep], lw[keep]
        order = np.argsort(v, kind="stable")
        v, lw = v[order], lw[order]
        lw = lw - special.logsumexp(lw)
        # log P(s >= v[i]) and log P(s < v[i]); index len(v) means "above every value"
        ge = np.append(np.logaddexp.accumulate(lw[::-1])[::-1], -np.inf)
        lt = np.concatenate([[-np.inf], np.logaddexp.accumulate(lw)])
        # how far each tail's mass exceeds its heaviest single cell (log ratio)
        spread_ge = ge[:-1] - np.maximum.accumulate(lw[::-1])[::-1]
        spread_lt = lt[1:] - np.maximum.accumulate(lw)
        spread = np.minimum(np.append(spread_ge, -np.inf), np.concatenate([[-np.inf], spread_lt]))
        return v, ge, lt, spread

    @staticmethod
    def _tails(
        side: tuple[NDArray[Any], ...], t: NDArray[Any]
    ) -> tuple[NDArray[Any], NDArray[Any]]:
        v, ge, lt, _ = side
        i = np.searchsorted(v, t, side="left")
        return ge[i], lt[i]

    #: a threshold must leave, in every tail of both sides, a mass at least this many times
    #: the tail's heaviest cell (so that no bound rests on one or two cells, whose masses and
    #: ties at the threshold are discretisation artefacts) ...
    min_cells: float = 50.0
    #: ... and at least exp(-(resolution_nats - margin_nats)), so that the mass the grid drops
    #: (below exp(-resolution_nats)) is negligible against it
    margin_nats: float = 20.0

    def _thresholds(self) -> NDArray[Any]:
        floor = -(self.resolution_nats - self.margin_nats)
        levels = -np.arange(0.0, -floor, 0.05)
        out = []
        for v, ge, lt, _ in (self._side0, self._side1):
            # indices where each tail crosses the levels (ge decreasing, lt increasing in index)
            i_ge = np.searchsorted(-ge[:-1], -levels, side="left")
            i_lt = np.searchsorted(lt[1:], levels, side="left")
            idx = np.clip(np.concatenate([i_ge, i_lt]), 0, v.size - 1)
            out.append(v[idx])
        t = np.unique(np.concatenate(out))
        keep = np.ones(t.size, dtype=bool)
        for v, ge, lt, spread in (self._side0, self._side1):
            i = np.searchsorted(v, t, side="left")
            keep &= (ge[i] >= floor) & (lt[i] >= floor) & (spread[i] >= math.log(self.min_cells))
        return t[keep]

    def expected_bound(self, n_test: float, *, delta: float, confidence: float) -> float:
        """Best epsilon bound over thresholds with ``n_test`` draws per side at expected counts."""
        t = self._thresholds()
        ge0, lt0 = self._tails(self._side0, t)
        ge1, lt1 = self._tails(self._side1, t)
        alpha = _half_alpha(confidence)
        n = float(n_test)
        best = 0.0
        # event {s >= t}: fp from P0(s >= t), fn from P1(s < t); and the complementary event
        for f_log, fc_log, m_log, mc_log in ((ge0, lt0, lt1, ge1), (lt0, ge0, ge1, lt1)):
            b = epsilon_from_bounds(
                cp_upper(n * np.exp(f_log), n, alpha),
                cp_upper(n * np.exp(m_log), n, alpha),
                cp_lower(n * np.exp(fc_log), n, alpha),
                cp_lower(n * np.exp(mc_log), n, alpha),
                delta,
            )
            best = max(best, float(b.max()))
        return best

    def exact_epsilon(self, *, delta: float) -> float:
        """The pair's epsilon at ``delta`` from the exact error rates of the best threshold.

        What an audit with this score approaches as N grows, counting only events of
        probability above ``exp(-(resolution_nats - margin_nats))`` (1e-26): for the likelihood-ratio score
        the released law, the pair's privacy at ``delta`` up to events rarer than that.
        """
        t = self._thresholds()
        ge0, lt0 = self._tails(self._side0, t)
        ge1, lt1 = self._tails(self._side1, t)
        best = 0.0
        for f_log, fc_log, m_log, mc_log in ((ge0, lt0, lt1, ge1), (lt0, ge0, ge1, lt1)):
            b = epsilon_from_bounds(
                np.exp(f_log), np.exp(m_log), np.exp(fc_log), np.exp(mc_log), delta
            )
            best = max(best, float(b.max()))
        return best

    def samples_needed(
        self, target: float, *, delta: float, confidence: float, train_fraction: float
    ) -> float:
        """Draws per side (selection + test split) for an expected bound of ``target``.

        Returns ``math.inf`` when even ``exp(resolution_nats - margin_nats)`` draws would not
        reach it.
        """
        test = 1.0 - train_fraction

        def f(log10_n: float) -> float:
            return self.expected_bound(10.0**log10_n * test, delta=delta, confidence=confidence)

        lo, hi = 1.0, (self.resolution_nats - self.margin_nats) / math.log(10.0)
        if f(hi) < target:
            return math.inf
        if f(lo) >= target:
            return 10.0**lo
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if f(mid) >= target:
                hi = mid
            else:
                lo = mid
            if hi - lo < 0.01:
                break
        return float(10.0**hi)
