r"""Variance fingerprints: which concept does an anisotropic mechanism protect? ([F26] §3)

A concept-aware mechanism (Mahalanobis noise, :math:`\Sigma = \mathrm{diag}(m + \delta)`)
puts its noise on the dimensions of the protected concept. Whoever sees several *fresh*
releases of the same documents can estimate the noise variance per dimension and read the
concept off it -- the choice of concept is itself sensitive ("this hospital protects
diagnoses").

For a group :math:`G` of documents, each released :math:`N` times as :math:`y_{j,1..N}`, the
fingerprint (eq. 4 as implemented here) is the per-dimension release variance averaged over the
group, L1-normalised:

.. math::
    f_G[k] = \frac{1}{|G|}\sum_{j \in G} \frac{1}{N-1}\sum_{r=1}^{N}
             \big(y_{j,r,k} - \bar y_{j,k}\big)^2, \qquad
    \phi_G = f_G / \|f_G\|_1

With a template :math:`t_c` per candidate concept (its L1-normalised covariance diagonal, or the
mean fingerprint of labelled reference groups), the attack predicts (eq. 5)

.. math::
    \hat c(G) = \arg\min_c \|\phi_G - t_c\|_2 .

A learned variant (:class:`FingerprintClassifier`) trains an MLP on labelled fingerprints from
the attacker's own simulations instead of using templates. Defences probed in [F26] §4 and in
the tests: isotropic noise (every concept has the same noise law, so no classifier can beat
chance), covariance smoothing :math:`\lambda I + (1-\lambda)\Sigma` (eq. 6), a secret random
permutation of the covariance diagonal, and keyed noise (re-releases are identical, so the
release variance is exactly zero; :func:`l1_normalize` maps a zero fingerprint to the uniform
vector and every group gets the same prediction).

``across="documents"`` computes the variance across the documents of a group instead (one
release each is enough). Signal variance then adds to the noise variance, but it does not depend
on the concept, so with noise much larger than the signal this *single-release* fingerprint still
reveals the concept -- also under keyed noise, which only removes the repetition.

References
----------
.. [F26] Anisotropic noise fingerprints reveal concept choice in concept-aware embedding privacy.
   Eqs. 4-6, Tables 1-2.
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). Algorithm 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_int
from ..core.rng import as_generator, spawn
from . import metrics
from ._common import (
    MLPFit,
    embeddings_f64,
    simulate_release,
    standard_scale,
    torch_module,
    torch_threads,
)
from .base import AttackResult

__all__ = [
    "FingerprintClassifier",
    "FingerprintReport",
    "TemplateMatcher",
    "l1_normalize",
    "permuted_diagonal",
    "release_stack",
    "simulate_fingerprints",
    "variance_fingerprint",
]

ACROSS = ("releases", "documents")


def release_stack(
    mechanism: Any,
    X: Any,
    n_releases: int,
    *,
    rng: Any = None,
    key: bytes | None = None,
    ids: Any = None,
) -> NDArray[np.float64]:
    """``n_releases`` releases of every row of ``X``: array (N, n, d_out), float64.

    Fresh noise draws every release from its own child of ``rng``. With ``key`` every release is
    keyed by (key, mechanism, id) and therefore bit-identical to the first (the contract of
    :mod:`privembed.keys.keyed`, tested there); the first release is computed once and repeated.
    """
    n_releases = check_int("n_releases", n_releases, ge=1)
    arr = embeddings_f64(X)
    if key is not None:
        if rng is not None:
            raise ValueError("give rng or key, not both (keyed noise is deterministic).")
        Y = np.asarray(simulate_release(mechanism, arr, key=key, ids=ids), dtype=np.float64)
        return np.repeat(Y[None], n_releases, axis=0)
    return np.stack([mechanism.privatize(arr, rng=g) for g in spawn(rng, n_releases)]).astype(
        np.float64
    )


def _groups(groups: Any, n: int) -> list[NDArray[np.int64]]:
    if groups is None:
        return [np.arange(n)]
    out = []
    for g in groups:
        idx = np.asarray(g, dtype=np.int64).ravel()
        if idx.size == 0 or idx.min() < 0 or idx.max() >= n:
            raise DataError(f"each group must hold document indices in [0, {n}), got {g!r}.")
        out.append(idx)
    if not out:
        raise DataError("groups must be non-empty.")
    return out


def variance_fingerprint(
    releases: Any, groups: Any = None, *, across: str = "releases"
) -> NDArray[np.float64]:
    r"""Fingerprints :math:`f_G` (eq. 4, before normalisation), one row per group.

    Parameters
    ----------
    releases : array_like, shape (N, n, d)
        ``N`` releases of ``n`` documents.
    groups : sequence of index arrays, optional
        Documents of each group (default: one group of all documents).
    across : {"releases", "documents"}
        Variance over the N releases of each document (eq. 4; needs N >= 2), averaged over the
        group -- or over the documents of the group (needs >= 2 per group), averaged over releases.

    Returns
    -------
    F : ndarray, shape (n_groups, d)

    Examples
    --------
    >>> R = np.array([[[0., 0.], [1., 1.]], [[2., 0.], [1., 3.]]])   # N = 2 releases, n = 2 docs
    >>> variance_fingerprint(R).tolist()          # doc 0: var (2, 0); doc 1: var (0, 2); mean
    [[1.0, 1.0]]
    >>> variance_fingerprint(R, [[0], [1]]).tolist()
    [[2.0, 0.0], [0.0, 2.0]]
    >>> variance_fingerprint(R, across="documents").tolist()   # release 0: (0.5, 0.5); 1: (0.5, 4.5)
    [[0.5, 2.5]]
    """
    across = check_choice("across", across, ACROSS)
    R = np.asarray(releases, dtype=np.float64)
    if R.ndim != 3 or 0 in R.shape:
        raise DataError(f"releases must have shape (N, n, d), got {R.shape}.")
    if not np.isfinite(R).all():
        raise DataError("releases has NaN or inf values.")
    G = _groups(groups, R.shape[1])
    # variances of data shifted by one sample (the variance is shift-invariant): identical
    # releases then give exactly 0, not rounding residue whose size follows |y|^2 -- which
    # would itself fingerprint the noise scale per dimension
    if across == "releases":
        if R.shape[0] < 2:
            raise DataError("the release variance needs N >= 2 releases per document.")
        V = (R - R[:1]).var(axis=0, ddof=1)
        return np.stack([V[g].mean(axis=0) for g in G])
    if min(g.size for g in G) < 2:
        raise DataError('across="documents" needs at least 2 documents per group.')
    out = []
    for g in G:
        S = R[:, g, :]
        out.append((S - S[:, :1, :]).var(axis=1, ddof=1).mean(axis=0))
    return np.stack(out)


def l1_normalize(F: Any) -> NDArray[np.float64]:
    """Rows scaled to sum 1; an all-zero row (no variance at all) becomes uniform 1/d.

    Examples
    --------
    >>> l1_normalize([[1.0, 3.0], [0.0, 0.0]]).tolist()
    [[0.25, 0.75], [0.5, 0.5]]
    """
    A = np.atleast_2d(np.asarray(F, dtype=np.float64))
    if (A < 0).any() or not np.isfinite(A).all():
        raise DataError("fingerprints must be finite and non-negative.")
    s = A.sum(axis=1, keepdims=True)
    return np.where(s > 0, A / np.where(s > 0, s, 1.0), 1.0 / A.shape[1])


def permuted_diagonal(diagonal: Any, rng: Any = None) -> NDArray[np.float64]:
    """A random permutation of a covariance diagonal (the [F26] §4 control ablation)."""
    d = np.asarray(diagonal, dtype=np.float64)
    if d.ndim != 1:
        raise DataError(f"diagonal must be 1-D, got shape {d.shape}.")
    return d[as_generator(rng).permutation(d.size)]


@dataclass(frozen=True)
class FingerprintReport:
    """How well an attacker names the protected concept of groups of releases."""

    accuracy: float
    macro_f1: float
    chance: float
    n_groups: int
    labels: list[str]
    confusion: list[list[int]] = field(repr=False)

    def result(self) -> AttackResult:
        """The accuracy against the blind attacker that always names the most common concept
        (``chance``), with the Wilson interval of the accuracy over the groups."""
        from .linkage import rate_interval

        hits = round(float(self.accuracy) * self.n_groups)
        lo, hi = rate_interval(hits, self.n_groups)
        return AttackResult(
            "fingerprint", "accuracy", self.accuracy, self.chance,
            min(lo, self.accuracy) - self.chance, max(hi, self.accuracy) - self.chance,
            f"Wilson interval over {self.n_groups} groups; blind = the most common concept",
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _report(
    y_true: Sequence[Any], y_pred: Sequence[Any], labels: Sequence[str]
) -> FingerprintReport:
    t = np.asarray([str(v) for v in y_true])
    p = np.asarray([str(v) for v in y_pred])
    labs = [str(v) for v in labels]
    conf = [[int(np.sum((t == a) & (p == b))) for b in labs] for a in labs]
    return FingerprintReport(
        accuracy=metrics.accuracy(t, p),
        macro_f1=metrics.macro_f1(t, p, labels=labs),
        chance=metrics.chance_accuracy(t),
        n_groups=int(t.size),
        labels=labs,
        confusion=conf,
    )


def _check_F(F: Any, d: int | None = None) -> NDArray[np.float64]:
    A = np.atleast_2d(np.asarray(F, dtype=np.float64))
    if A.ndim != 2 or A.shape[0] == 0:
        raise DataError(f"fingerprints must have shape (n_groups, d), got {A.shape}.")
    if d is not None and A.shape[1] != d:
        raise DataError(f"fingerprints have dimension {A.shape[1]} but the attack uses {d}.")
    return A


class TemplateMatcher:
    """Arg-min L2 matching of L1-normalised fingerprints to per-concept templates ([F26] eq. 5).

    Build it from the candidate covariances (:meth:`from_covariances`: the attacker knows the
    mechanism and can learn the candidate masks itself) or from labelled reference fingerprints
    (:meth:`fit`).

    Examples
    --------
    >>> m = TemplateMatcher.from_covariances({"a": [3.0, 1.0], "b": [1.0, 3.0]})
    >>> m.predict([[5.0, 1.0], [0.0, 2.0], [0.0, 0.0]])   # last: zero fingerprint -> uniform
    ['a', 'b', 'a']
    """

    def __init__(self) -> None:
        self.labels_: list[str] = []
        self.templates_: NDArray[np.float64] | None = None

    @classmethod
    def from_covariances(cls, covariances: Mapping[str, Any]) -> TemplateMatcher:
        """Templates = L1-normalised covariance diagonals (a full matrix contributes its diagonal)."""
        if not covariances:
            raise DataError("covariances must name at least one concept.")
        rows = []
        for c in covariances.values():
            C = np.asarray(c, dtype=np.float64)
            rows.append(np.diag(C) if C.ndim == 2 else C)
        if len({r.shape for r in rows}) != 1 or rows[0].ndim != 1:
            raise DataError("covariance diagonals must all have the same dimension.")
        m = cls()
        m.labels_ = [str(k) for k in covariances]
        m.templates_ = l1_normalize(np.stack(rows))
        return m

    def fit(self, F: Any, y: Sequence[Any]) -> TemplateMatcher:
        """Templates = mean L1-normalised fingerprint of each label, L1-normalised again."""
        A = l1_normalize(_check_F(F))
        lab = np.asarray([str(v) for v in y])
        if lab.size != A.shape[0]:
            raise DataError(f"y has {lab.size} labels but F has {A.shape[0]} fingerprints.")
        self.labels_ = sorted(set(lab.tolist()))
        self.templates_ = l1_normalize(np.stack([A[lab == c].mean(axis=0) for c in self.labels_]))
        return self

    def distances(self, F: Any) -> NDArray[np.float64]:
        """L2 distance (n_groups, n_concepts) of each normalised fingerprint to each template."""
        if self.templates_ is None:
            raise RuntimeError("this TemplateMatcher has no templates; fit it first.")
        A = l1_normalize(_check_F(F, self.templates_.shape[1]))
        diff = A[:, None, :] - self.templates_[None, :, :]
        return np.sqrt(np.einsum("gcd,gcd->gc", diff, diff))

    def predict(self, F: Any) -> list[str]:
        """The concept with the nearest template (ties: the first in label order)."""
        D = self.distances(F)
        return [self.labels_[j] for j in np.argmin(D, axis=1)]

    def score(self, F: Any, y: Sequence[Any]) -> FingerprintReport:
        return _report(y, self.predict(F), self.labels_)


class FingerprintClassifier(MLPFit):
    """An MLP on L1-normalised fingerprints (the learned variant of [F26]; no templates).

    Inputs are :math:`d\\,\\phi_G` (mean 1 per dimension), z-scored with the training statistics.

    Parameters
    ----------
    hidden : sequence of int, default (128,)
    epochs : int, default 200
    batch_size : int, default 32
    lr : float, default 1e-3
    weight_decay : float, default 1e-4
    num_threads : int or None, default 1
    """

    def __init__(
        self,
        *,
        hidden: Sequence[int] = (128,),
        epochs: int = 200,
        batch_size: int = 32,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        num_threads: int | None = 1,
    ) -> None:
        self._set_training(hidden, epochs, batch_size, lr, weight_decay, num_threads)
        self.labels_: list[str] = []
        self.model_: Any = None

    def _inputs(self, F: Any) -> NDArray[np.float32]:
        A = l1_normalize(_check_F(F, self.dim_)) * self.dim_
        return ((A - self._mu) / self._sd).astype(np.float32)

    def fit(self, F: Any, y: Sequence[Any], *, rng: Any = None) -> FingerprintClassifier:
        A = _check_F(F)
        lab = [str(v) for v in y]
        if len(lab) != A.shape[0]:
            raise DataError(f"y has {len(lab)} labels but F has {A.shape[0]} fingerprints.")
        self.labels_ = sorted(set(lab))
        target = np.array([self.labels_.index(v) for v in lab], dtype=np.int64)
        self.dim_ = A.shape[1]
        self._mu, self._sd = standard_scale(l1_normalize(A) * self.dim_)
        torch = torch_module()
        gen = as_generator(rng)
        self._fit_mlp(
            torch, torch.nn.CrossEntropyLoss(), self._inputs(A), target, len(self.labels_), gen
        )
        return self

    def predict(self, F: Any) -> list[str]:
        if self.model_ is None:
            raise RuntimeError("this FingerprintClassifier is not fitted yet; call fit() first.")
        torch = torch_module()
        with torch_threads(torch, self.num_threads), torch.no_grad():
            logits = self.model_(torch.from_numpy(self._inputs(F))).numpy()
        return [self.labels_[j] for j in np.argmax(logits, axis=1)]

    def score(self, F: Any, y: Sequence[Any]) -> FingerprintReport:
        return _report(y, self.predict(F), self.labels_)


def simulate_fingerprints(
    mechanisms: Mapping[str, Any],
    X: Any,
    *,
    n_groups: int = 50,
    group_size: int = 30,
    n_releases: int = 10,
    across: str = "releases",
    rng: Any = None,
    key: bytes | None = None,
) -> tuple[NDArray[np.float64], list[str]]:
    """Labelled fingerprints: ``n_groups`` groups per concept, documents drawn from one pool.

    For every concept ``c`` in ``mechanisms`` and every group, ``group_size`` documents are drawn
    without replacement from the rows of ``X`` (the same pool for every concept, so documents
    carry no information about ``c``), released ``n_releases`` times by ``mechanisms[c]`` and
    summarised by :func:`variance_fingerprint`.

    Returns
    -------
    F : ndarray, shape (n_groups * n_concepts, d)
    y : list of str
    """
    if not mechanisms:
        raise DataError("mechanisms must name at least one concept.")
    n_groups = check_int("n_groups", n_groups, ge=1)
    group_size = check_int("group_size", group_size, ge=1)
    across = check_choice("across", across, ACROSS)
    arr = embeddings_f64(X)
    if group_size > arr.shape[0]:
        raise DataError(
            f"group_size={group_size} exceeds the {arr.shape[0]} documents of the pool."
        )
    gen = as_generator(rng)
    rows, labels = [], []
    for label, mech in mechanisms.items():
        for _ in range(n_groups):
            idx = np.sort(gen.choice(arr.shape[0], size=group_size, replace=False))
            R = release_stack(
                mech,
                arr[idx],
                n_releases,
                rng=None if key is not None else gen,
                key=key,
                ids=idx.tolist() if key is not None else None,
            )
            rows.append(variance_fingerprint(R, across=across)[0])
            labels.append(str(label))
    return np.stack(rows), labels
