r"""Neuron sensitivity: does the learned mask point at the dimensions a concept moves?

[T26] Def. 7 measures how much removing a concept moves each embedding dimension,

.. math::
    \Delta_i = \max_{(s^+, s^-)} \big|\Phi(s^+)_i - \Phi(s^-)_i\big|,

over the D+/D- pairs, and App. A compares the dimensions a mask ranks highest with those it ranks
lowest. :func:`sensitivity_diagnostic` does both: the top and bottom ``fraction`` of dimensions by
mask score, their mean :math:`\Delta_i`, and a one-sided Wilcoxon signed-rank test over pairs of
"mean :math:`|\Phi(s^+)_i - \Phi(s^-)_i|` over the top dimensions" against the same over the
bottom dimensions (plus a Mann-Whitney rank-sum test of :math:`\Delta_i` between the two groups
of dimensions).

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). Def. 7, App. A.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from ..core._validation import DataError, check_embeddings, check_real

__all__ = ["SensitivityDiagnostic", "neuron_sensitivity", "sensitivity_diagnostic"]


def _pairs(X_pos: Any, X_neg: Any) -> NDArray[np.float64]:
    P, _ = check_embeddings(X_pos, name="X_pos", allow_zero=True)
    N, _ = check_embeddings(X_neg, name="X_neg", allow_zero=True)
    if P.shape != N.shape:
        raise DataError(f"X_pos and X_neg must have the same shape, got {P.shape} and {N.shape}.")
    return np.abs(P.astype(np.float64) - N.astype(np.float64))


def neuron_sensitivity(X_pos: Any, X_neg: Any) -> NDArray[np.float64]:
    r""":math:`\Delta_i = \max_j |X^+_{ji} - X^-_{ji}|` ([T26] Def. 7).

    Examples
    --------
    >>> neuron_sensitivity([[1.0, 0.0], [0.5, 0.2]], [[0.0, 0.0], [0.5, -0.1]]).round(6).tolist()
    [1.0, 0.3]
    """
    return _pairs(X_pos, X_neg).max(axis=0)


@dataclass(frozen=True)
class SensitivityDiagnostic:
    """Top-vs-bottom comparison of a mask's dimensions ([T26] App. A).

    Attributes
    ----------
    fraction : float
        Share of dimensions in each group.
    top_dims, bottom_dims : list of int
        Dimensions with the highest / lowest mask scores.
    top_mean_sensitivity, bottom_mean_sensitivity : float
        Mean :math:`\\Delta_i` (Def. 7) over each group.
    ratio : float
        ``top_mean_sensitivity / bottom_mean_sensitivity``.
    wilcoxon_statistic, wilcoxon_pvalue : float
        One-sided signed-rank test over pairs that the mean absolute change on the top dimensions
        exceeds that on the bottom dimensions.
    ranksum_pvalue : float
        One-sided Mann-Whitney test that :math:`\\Delta_i` is larger on the top dimensions.
    n_pairs : int
    """

    fraction: float
    top_dims: list[int]
    bottom_dims: list[int]
    top_mean_sensitivity: float
    bottom_mean_sensitivity: float
    ratio: float
    wilcoxon_statistic: float
    wilcoxon_pvalue: float
    ranksum_pvalue: float
    n_pairs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sensitivity_diagnostic(
    X_pos: Any, X_neg: Any, scores: Any, *, fraction: float = 0.1
) -> SensitivityDiagnostic:
    """Compare the dimensions a mask ranks highest and lowest by how much the concept moves them.

    Parameters
    ----------
    X_pos, X_neg : array_like, shape (n_pairs, d)
        Paired embeddings of D+ and D- (use pairs the mask was *not* trained on where possible).
    scores : array_like, shape (d,)
        Ranking of the dimensions, e.g. the learned ``log_alpha`` (continuous, so no ties) or the
        mask; ties keep index order.
    fraction : float in (0, 0.5], default 0.1

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> neg = rng.standard_normal((300, 20)); pos = neg.copy(); pos[:, :2] += 1.0
    >>> diag = sensitivity_diagnostic(pos, neg, np.r_[np.ones(2), np.zeros(18)])
    >>> diag.top_dims, diag.wilcoxon_pvalue < 1e-6
    ([0, 1], True)
    """
    A = _pairs(X_pos, X_neg)
    n, d = A.shape
    fraction = check_real("fraction", fraction, gt=0, le=0.5)
    sc = np.asarray(scores, dtype=np.float64)
    if sc.shape != (d,):
        raise DataError(f"scores must have shape ({d},), got {sc.shape}.")
    k = max(1, round(fraction * d))
    order = np.argsort(-sc, kind="stable")
    top, bottom = np.sort(order[:k]), np.sort(order[-k:])
    delta = A.max(axis=0)
    a, b = A[:, top].mean(axis=1), A[:, bottom].mean(axis=1)
    if n >= 2 and np.any(a != b):
        w = stats.wilcoxon(a, b, alternative="greater")
        w_stat, w_p = float(w.statistic), float(w.pvalue)
    else:
        w_stat, w_p = float("nan"), float("nan")
    rs = stats.mannwhitneyu(delta[top], delta[bottom], alternative="greater")
    top_mean, bottom_mean = float(delta[top].mean()), float(delta[bottom].mean())
    return SensitivityDiagnostic(
        fraction=fraction,
        top_dims=top.tolist(),
        bottom_dims=bottom.tolist(),
        top_mean_sensitivity=top_mean,
        bottom_mean_sensitivity=bottom_mean,
        ratio=top_mean / bottom_mean if bottom_mean > 0 else float("inf"),
        wilcoxon_statistic=w_stat,
        wilcoxon_pvalue=w_p,
        ranksum_pvalue=float(rs.pvalue),
        n_pairs=n,
    )
