r"""Privacy metrics of the attacks: Leakage, Confidence, token AUC, classification scores.

Leakage and Confidence follow [T26] (eqs. 13 and 14), formalised here for a multi-label
attacker that outputs, for text :math:`i`, a probability :math:`p_i(t)` for every token
:math:`t` of its vocabulary and a *recovered* set :math:`R_i`:

.. math::
    \mathrm{Leakage} = \frac{\sum_i |S_i \cap R_i|}{\sum_i |S_i|}, \qquad
    \mathrm{Confidence} = \frac{\sum_i \sum_{t \in S_i} p_i(t)}{\sum_i |S_i|}

where :math:`S_i` is the set of sensitive tokens of text :math:`i` (an occurrence is a
(text, token) pair; a token repeated inside one text counts once, as the attacker predicts sets).
Sensitive tokens outside the attacker's vocabulary count in the denominator and have
:math:`p_i(t) = 0`. Both are reported as fractions in [0, 1] (the papers print percentages).
What "recovered" means is the attack's rule, stated where the attack defines it: for the
multi-label classifier, :math:`p_i(t) \ge 0.5` by default (or the top-k tokens); for sentence
inversion, the tokens of the reconstructed sentence.

The token AUC ([F26] Table 2, "token privacy AUC") is the area under the ROC curve of
:math:`p_i(t)` as a detector of "text i contains t", per token, with ties counted one half
(the Mann-Whitney statistic on mid-ranks); 0.5 is chance.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). Eqs. 13-14.
.. [F26] Anisotropic noise fingerprints reveal concept choice in concept-aware embedding privacy.
   Table 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.stats import rankdata

from ..core._validation import DataError, check_int, check_real
from ..core.rng import as_generator

__all__ = [
    "accuracy",
    "auc",
    "chance_accuracy",
    "confidence",
    "leakage",
    "leakage_excess",
    "macro_f1",
    "per_token_auc",
    "set_f1",
]


def _sets(name: str, items: Iterable[Iterable[str]]) -> list[frozenset[str]]:
    out = [frozenset(x) for x in items]
    if not out:
        raise DataError(f"{name} must be non-empty.")
    return out


def leakage(sensitive: Iterable[Iterable[str]], recovered: Iterable[Iterable[str]]) -> float:
    r"""Share of sensitive token occurrences the attacker recovered ([T26] eq. 13).

    Parameters
    ----------
    sensitive : sequence of sets of str, length n
        :math:`S_i`, the sensitive tokens of each text.
    recovered : sequence of sets of str, length n
        :math:`R_i`, the tokens the attacker recovered for each text.

    Returns
    -------
    float in [0, 1]; NaN when there is no sensitive token at all.

    Examples
    --------
    >>> leakage([{"paris", "flu"}, {"tom"}, set()], [{"paris", "the"}, {"tom", "flu"}, {"x"}])
    0.6666666666666666
    """
    S = _sets("sensitive", sensitive)
    R = _sets("recovered", recovered)
    if len(S) != len(R):
        raise DataError(f"sensitive has {len(S)} texts but recovered has {len(R)}.")
    total = sum(len(s) for s in S)
    if total == 0:
        return float("nan")
    return sum(len(s & r) for s, r in zip(S, R, strict=True)) / total


def confidence(
    sensitive: Iterable[Iterable[str]], proba: Any, vocabulary: Sequence[str] | Mapping[str, int]
) -> float:
    r"""Mean probability the attacker gives the sensitive tokens that are present ([T26] eq. 14).

    Parameters
    ----------
    sensitive : sequence of sets of str, length n
    proba : array_like, shape (n, V)
        :math:`p_i(t)` for every vocabulary token.
    vocabulary : sequence of str (length V) or mapping token -> column
        Tokens outside it get probability 0.

    Examples
    --------
    >>> confidence([{"a", "zz"}, {"b"}], [[0.9, 0.2], [0.4, 0.6]], ["a", "b"])
    0.5
    """
    S = _sets("sensitive", sensitive)
    P = np.asarray(proba, dtype=np.float64)
    col = (
        vocabulary if isinstance(vocabulary, Mapping) else {t: j for j, t in enumerate(vocabulary)}
    )
    if P.ndim != 2 or P.shape[0] != len(S):
        raise DataError(f"proba must have shape ({len(S)}, V), got {P.shape}.")
    total = sum(len(s) for s in S)
    if total == 0:
        return float("nan")
    acc = 0.0
    for i, s in enumerate(S):
        acc += sum(float(P[i, col[t]]) for t in s if t in col)
    return acc / total


def auc(scores: Any, labels: Any) -> float:
    """ROC AUC of ``scores`` for binary ``labels``, ties counted one half.

    scikit-learn's :func:`~sklearn.metrics.roc_auc_score` (the trapezoidal ROC area counts a
    tied (positive, negative) pair one half, the Mann-Whitney U statistic); NaN when only one
    class is present instead of sklearn's error.

    Examples
    --------
    >>> auc([0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1])   # one tied pair: (3 + 0.5) / 4
    0.875
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise DataError(f"scores and labels must have the same length, got {s.size} and {y.size}.")
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        return float("nan")
    from ..core._optional import require

    sk = require("sklearn.metrics", "learn", purpose="ROC AUC")
    return float(sk.roc_auc_score(y, s))


def per_token_auc(
    scores: Any, labels: Any, *, columns: Sequence[int] | None = None
) -> NDArray[np.float64]:
    """:func:`auc` of every column of ``scores`` (n, V) against the presence ``labels`` (n, V).

    Columns where the token is always or never present get NaN. Computed for all columns at
    once from mid-ranks (the Mann-Whitney U statistic, the same number as
    :func:`~sklearn.metrics.roc_auc_score`, tested): one ``roc_auc_score`` call per column is
    25x slower (1.0 s against 0.03 s for 500 texts x 800 tokens, measured), and this runs for
    every release a sweep attacks.
    """
    S = np.asarray(scores, dtype=np.float64)
    Y = np.asarray(labels).astype(bool)
    if S.shape != Y.shape or S.ndim != 2:
        raise DataError(f"scores and labels must be (n, V) of one shape, got {S.shape}, {Y.shape}.")
    if columns is not None:
        cols = np.asarray(list(columns), dtype=np.int64)
        S, Y = S[:, cols], Y[:, cols]
    n = S.shape[0]
    if S.shape[1] == 0:
        return np.zeros(0, dtype=np.float64)
    ranks = rankdata(S, axis=0)  # mid-ranks for ties
    n_pos = Y.sum(axis=0).astype(np.float64)
    n_neg = n - n_pos
    u = np.where(Y, ranks, 0.0).sum(axis=0) - n_pos * (n_pos + 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        out = u / (n_pos * n_neg)
    out[(n_pos == 0) | (n_neg == 0)] = np.nan
    return out


def leakage_excess(
    sensitive: Iterable[Iterable[str]],
    recovered: Iterable[Iterable[str]],
    baseline: Iterable[Iterable[str]],
    *,
    level: float = 0.95,
    n_boot: int = 2000,
    rng: Any = 0,
) -> tuple[float, float, float]:
    r"""Leakage above a blind baseline's, with a paired bootstrap confidence interval.

    The excess is :math:`\mathrm{Leakage}(R) - \mathrm{Leakage}(B)` for the attacker's
    recovered sets :math:`R_i` and a blind attacker's :math:`B_i` on the same texts. Its
    interval is the percentile interval of ``n_boot`` bootstrap resamples of the *texts* (both
    attackers resampled together, so the comparison is paired; the ratio's denominator is
    resampled too). An attack beats chance when the interval's lower end is above 0.

    Returns
    -------
    (excess, low, high) : tuple of float
        NaN when there is no sensitive token.

    Examples
    --------
    >>> S = [{"a", "b"}] * 50
    >>> ex, lo, hi = leakage_excess(S, [{"a", "b"}] * 50, [{"a"}] * 50)
    >>> ex, lo, hi
    (0.5, 0.5, 0.5)
    """
    S = _sets("sensitive", sensitive)
    R = _sets("recovered", recovered)
    B = _sets("baseline", baseline)
    if not len(S) == len(R) == len(B):
        raise DataError(
            f"sensitive, recovered and baseline must have one entry per text, got "
            f"{len(S)}, {len(R)} and {len(B)}."
        )
    level = check_real("level", level, gt=0, lt=1)
    n_boot = check_int("n_boot", n_boot, ge=1)
    size = np.array([len(s) for s in S], dtype=np.float64)
    if size.sum() == 0:
        nan = float("nan")
        return nan, nan, nan
    diff = np.array(
        [len(s & r) - len(s & b) for s, r, b in zip(S, R, B, strict=True)], dtype=np.float64
    )
    excess = float(diff.sum() / size.sum())
    idx = as_generator(rng).integers(0, len(S), size=(n_boot, len(S)))
    den = size[idx].sum(axis=1)
    boot = diff[idx].sum(axis=1) / np.where(den > 0, den, 1.0)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return excess, float(lo), float(hi)


def set_f1(true: Iterable[Iterable[str]], predicted: Iterable[Iterable[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 of predicted token sets (Song & Raghunathan's inversion score).

    Examples
    --------
    >>> set_f1([{"a", "b"}, {"c"}], [{"a"}, {"c", "d"}])
    {'precision': 0.6666666666666666, 'recall': 0.6666666666666666, 'f1': 0.6666666666666666}
    """
    T = _sets("true", true)
    P = _sets("predicted", predicted)
    if len(T) != len(P):
        raise DataError(f"true has {len(T)} texts but predicted has {len(P)}.")
    tp = sum(len(t & p) for t, p in zip(T, P, strict=True))
    n_pred = sum(len(p) for p in P)
    n_true = sum(len(t) for t in T)
    prec = tp / n_pred if n_pred else 0.0
    rec = tp / n_true if n_true else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    return {"precision": prec, "recall": rec, "f1": f1}


def accuracy(y_true: Any, y_pred: Any) -> float:
    """Share of equal labels.

    Examples
    --------
    >>> accuracy(["a", "b", "b"], ["a", "a", "b"])
    0.6666666666666666
    """
    t = np.asarray(y_true)
    p = np.asarray(y_pred)
    if t.shape != p.shape or t.ndim != 1 or t.size == 0:
        raise DataError(
            f"y_true and y_pred must be non-empty 1-D of one length, got {t.shape}, {p.shape}."
        )
    return float(np.mean(t == p))


def macro_f1(y_true: Any, y_pred: Any, *, labels: Sequence[Any] | None = None) -> float:
    """Unweighted mean over classes of the per-class F1 (a class never predicted nor present: skipped).

    Examples
    --------
    >>> macro_f1(["a", "a", "b", "b"], ["a", "b", "b", "b"])   # F1(a) = 2/3, F1(b) = 4/5
    0.7333333333333334
    """
    t = np.asarray(y_true)
    p = np.asarray(y_pred)
    accuracy(t, p)  # validates
    classes = list(labels) if labels is not None else sorted(set(t.tolist()) | set(p.tolist()))
    scores = []
    for c in classes:
        tp = int(np.sum((t == c) & (p == c)))
        fp = int(np.sum((t != c) & (p == c)))
        fn = int(np.sum((t == c) & (p != c)))
        if tp + fp + fn == 0:
            continue
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else float("nan")


def chance_accuracy(y_true: Any) -> float:
    """Accuracy of the best label-blind guess: the share of the most frequent class.

    Examples
    --------
    >>> chance_accuracy(["a", "b", "c", "a"])
    0.5
    """
    t = np.asarray(y_true)
    if t.ndim != 1 or t.size == 0:
        raise DataError(f"y_true must be non-empty 1-D, got shape {t.shape}.")
    _, counts = np.unique(t, return_counts=True)
    return float(counts.max() / t.size)
