r"""Concept erasure with LEACE: remove what a linear probe could read about a concept.

Where the Mahalanobis mechanism ([T26]) adds noise along the dimensions a concept profile
selects, LEACE (LEAst-squares Concept Erasure, [B23]) removes the concept outright: it fits the
affine map :math:`x \mapsto x - P(x - b)` of least squared change (in the whitened geometry of
the data) after which the class-conditional means of the concept coincide, so **no linear
classifier can predict the concept better than a constant** on the fitting distribution
("linear guardedness"). It is deterministic, so it costs no privacy budget and repeated releases
add nothing, but it carries no differential-privacy guarantee: a non-linear probe may still
recover the concept, and held-out data are only approximately guarded. Use it before noise (the
mechanism's guarantee is unchanged: erasure is pre-processing of the input) or instead of it
where a concept, not a record, is what must not leak.

**Fit it on real text.** An eraser is only as good as the data it is fitted on. Fitted on
generated D+/D- pairs (:func:`privembed.concepts.build_pairs`: sentences with the concept and the
same sentences with it removed, :meth:`ConceptEraser.from_pairs`) it removes the direction that
separates "a template with a disease word" from "the same template without it" -- on real
definitions that mention a disease, a linear probe still read the concept at ROC AUC 0.99 after
it (docs/concepts.md). Fit it on **labelled real text** instead (:func:`fit_checked`: the user's
own labelled sample, or real texts labelled by whether the concept occurs in them,
:func:`concept_labels`), and read the held-out check it returns (:class:`ErasureCheck`): a
linear and a non-linear probe, trained on a fitting split and scored by ROC AUC on a held-out
split, before and after erasure. Any labels work for fitting: an int class per row
(multi-class, erasing a rank k - 1 subspace) or an (n, k) one-hot matrix; the check needs two
classes.

The eraser is stored as ``proj_left`` (d, r), ``proj_right`` (r, d) and ``bias`` (d,), applied
with NumPy alone (fitting needs the ``concept-erasure`` package and torch: extra ``learn``), in
an ``.npz`` file saved beside the concept profile (:func:`eraser_path`).

References
----------
.. [B23] Belrose, Schneider-Joseph, Ravfogel, Cotterell, Raff, Biderman (2023). LEACE: Perfect
   linear concept erasure in closed form. NeurIPS. arXiv:2306.03819.
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_choice, check_embeddings, check_real
from ..core.rng import as_generator
from ._npz import read_metadata, write_npz

__all__ = [
    "ERASER_FORMAT",
    "READABLE_AUC",
    "ConceptEraser",
    "ErasureCheck",
    "concept_labels",
    "eraser_path",
    "fit_checked",
    "fit_iterative",
    "learn_eraser",
    "load_eraser",
    "probe_aucs",
]

ERASER_FORMAT = "privembed.concept-eraser/1"
#: a held-out probe AUC above this after erasure means the concept is still readable
READABLE_AUC = 0.6


def eraser_path(profile_path: str | Path) -> Path:
    """Where the eraser of a concept profile lives: ``<profile>.eraser.npz`` beside it.

    Examples
    --------
    >>> eraser_path("profiles/disease.profile").as_posix()
    'profiles/disease.profile.eraser.npz'
    """
    p = Path(profile_path)
    return p.with_name(p.name + ".eraser.npz")


def _labels(labels: Any, n: int) -> tuple[NDArray[np.float64], int]:
    """Labels as an (n, k) float matrix: one column for two classes, one-hot for more."""
    z = np.asarray(labels)
    if z.ndim == 1:
        if z.shape[0] != n:
            raise DataError(f"labels has {z.shape[0]} entries but X has {n} rows.")
        classes, inv = np.unique(z, return_inverse=True)
        if classes.size < 2:
            raise DataError(f"labels must hold at least 2 classes, got {classes.tolist()}.")
        if classes.size == 2:
            return inv.astype(np.float64)[:, None], 2
        return np.eye(classes.size)[inv], int(classes.size)
    if z.ndim == 2 and z.shape[0] == n:
        if not np.isfinite(z.astype(np.float64)).all():
            raise DataError("labels has non-finite values.")
        return z.astype(np.float64), int(z.shape[1]) + (1 if z.shape[1] == 1 else 0)
    raise DataError(
        f"labels must be (n,) classes or (n, k) one-hot with n = {n}, got shape {z.shape}."
    )


class ConceptEraser:
    r"""A fitted LEACE eraser: ``transform(X) = X - ((X - bias) @ proj_right.T) @ proj_left.T``.

    Parameters
    ----------
    proj_left : array_like, shape (d, r)
    proj_right : array_like, shape (r, d)
    bias : array_like, shape (d,), optional
        The data mean the erasure is centred on (``None``: linear, not affine).
    metadata : dict, optional
        What was fitted: concept name, method, label counts, embedding model.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.integers(0, 2, 400)
    >>> X = rng.standard_normal((400, 8)); X[:, 0] += 2.0 * z     # the concept lives on dim 0
    >>> er = ConceptEraser.fit(X, z)
    >>> Xe = er.transform(X, renormalize=False)
    >>> gap = Xe[z == 1].mean(0) - Xe[z == 0].mean(0)
    >>> bool(np.abs(gap).max() < 1e-6), er.rank
    (True, 1)
    """

    def __init__(
        self,
        proj_left: Any,
        proj_right: Any,
        bias: Any = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        L = np.asarray(proj_left, dtype=np.float64)
        R = np.asarray(proj_right, dtype=np.float64)
        if L.ndim != 2 or R.ndim != 2 or L.shape[::-1] != R.shape:
            raise DataError(
                f"proj_left (d, r) and proj_right (r, d) must match, got {L.shape} and {R.shape}."
            )
        b = None if bias is None else np.asarray(bias, dtype=np.float64)
        if b is not None and b.shape != (L.shape[0],):
            raise DataError(f"bias must have shape ({L.shape[0]},), got {b.shape}.")
        self.proj_left, self.proj_right, self.bias = L, R, b
        self.metadata = dict(metadata or {})

    # -- fitting ------------------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        X: Any,
        labels: Any,
        *,
        method: str = "leace",
        shrinkage: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> ConceptEraser:
        """Fit LEACE ([B23]) with the ``concept-erasure`` package.

        Parameters
        ----------
        X : array_like, shape (n, d)
            Embeddings (exact, unprotected).
        labels : array_like, shape (n,) or (n, k)
            The concept per row: class ids (2 classes: one direction is erased; k classes:
            k - 1 directions) or a one-hot / continuous (n, k) matrix.
        method : {"leace", "orth"}, default "leace"
            ``"orth"`` is the plain orthogonal projection (more damage, no covariance needed).
        shrinkage : bool, default True
            Ledoit-Wolf-style shrinkage of the covariance (stable when n is not much larger
            than d).
        """
        A, _ = check_embeddings(X, name="X")
        method = check_choice("method", method, ("leace", "orth"))
        Z, classes = _labels(labels, A.shape[0])
        torch = require("torch", "learn", purpose="fitting a LEACE eraser")
        ce = require("concept_erasure", "learn", purpose="fitting a LEACE eraser")
        fitter = ce.LeaceFitter.fit(
            torch.from_numpy(np.ascontiguousarray(A, dtype=np.float64)),
            torch.from_numpy(Z),
            method=method,
            shrinkage=shrinkage,
        )
        er = fitter.eraser
        meta = {
            "method": method,
            "shrinkage": shrinkage,
            "n": int(A.shape[0]),
            "classes": classes,
            **(metadata or {}),
        }
        bias = None if er.bias is None else er.bias.numpy()
        return cls(er.proj_left.numpy(), er.proj_right.numpy(), bias, metadata=meta)

    @classmethod
    def from_pairs(cls, positives: Any, negatives: Any, **kwargs: Any) -> ConceptEraser:
        """Fit on D+ (label 1) and D- (label 0) embeddings, e.g. of a
        :class:`~privembed.concepts.PairSet`'s ``positives`` and ``negatives``."""
        P, _ = check_embeddings(positives, name="positives")
        N, _ = check_embeddings(negatives, name="negatives", dim=P.shape[1])
        X = np.concatenate([P, N])
        z = np.r_[np.ones(P.shape[0], dtype=np.int64), np.zeros(N.shape[0], dtype=np.int64)]
        meta = {
            "labels": "D+ = 1, D- = 0",
            "fitted_on": "D+/D- pairs (sentences with the concept and the same without it)",
            "n_pos": int(P.shape[0]),
            "n_neg": int(N.shape[0]),
        }
        meta.update(kwargs.pop("metadata", None) or {})
        return cls.fit(X, z, metadata=meta, **kwargs)

    # -- use ----------------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        return int(self.proj_left.shape[0])

    @property
    def rank(self) -> int:
        """Number of directions erased."""
        return int(np.linalg.matrix_rank(self.proj_left @ self.proj_right, tol=1e-8))

    @property
    def projection(self) -> NDArray[np.float64]:
        """The (d, d) matrix ``I - proj_left @ proj_right`` (applied to ``x - bias``)."""
        return np.eye(self.dim) - self.proj_left @ self.proj_right

    def transform(self, X: Any, *, renormalize: bool = True) -> NDArray[Any]:
        """Erase the concept from embeddings ``X`` (shape (n, d) or (d,)).

        ``X`` is not modified; the dtype is kept. ``renormalize`` scales rows back to unit
        length (the default: embeddings are compared by cosine).
        """
        arr, single = check_embeddings(X, dim=self.dim, allow_zero=not renormalize)
        A = np.asarray(arr, dtype=np.float64)
        delta = A - self.bias if self.bias is not None else A
        out = A - (delta @ self.proj_right.T) @ self.proj_left.T
        if renormalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            if not np.all(norms > 0):
                raise DataError("erasure left a zero row; pass renormalize=False.")
            out /= norms
        out = out.astype(arr.dtype if np.issubdtype(arr.dtype, np.floating) else np.float64)
        return out[0] if single else out

    __call__ = transform

    def __repr__(self) -> str:
        concept = self.metadata.get("concept")
        what = f", concept={concept!r}" if concept else ""
        return f"ConceptEraser(dim={self.dim}, rank={self.rank}{what})"

    # -- files --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the eraser atomically to an ``.npz`` file (see :func:`eraser_path`)."""
        arrays = {"proj_left": self.proj_left, "proj_right": self.proj_right, "bias": self.bias}
        return write_npz(Path(path), {"format": ERASER_FORMAT, **self.metadata}, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ConceptEraser:
        """Read an eraser written by :meth:`save`."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"eraser not found: {p}")
        try:
            with np.load(p, allow_pickle=False) as z:
                if "proj_left" not in z.files or "proj_right" not in z.files:
                    raise DataError(f"{p} is not a concept eraser (no proj_left/proj_right).")
                meta = read_metadata(z)
                fmt = meta.pop("format", ERASER_FORMAT)
                if fmt != ERASER_FORMAT:
                    raise DataError(f"{p}: unknown eraser format {fmt!r}.")
                bias = z["bias"] if "bias" in z.files else None
                return cls(z["proj_left"], z["proj_right"], bias, metadata=meta)
        except (OSError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"cannot read eraser {p}: {str(exc).splitlines()[0]}") from None


# ---------------------------------------------------------------------------------------------
# the held-out check
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErasureCheck:
    """Held-out probe ROC AUCs before and after erasure (0.5 = chance).

    The probes are trained on the fitting split (clean rows before, erased rows after: an
    attacker who knows the eraser and has labelled data) and scored on the held-out split.

    Attributes
    ----------
    linear_before, linear_after : float
        Logistic regression.
    mlp_before, mlp_after : float or None
        An MLP with one hidden layer of 128 units (``None`` when not run).
    n_fit, n_heldout : int
    positives : float
        Share of label 1 in the held-out split.
    data : str
        What the eraser was fitted and checked on ("labelled texts: ...", "generated
        sentences (D+/D- pairs)").
    """

    linear_before: float
    linear_after: float
    mlp_before: float | None
    mlp_after: float | None
    n_fit: int
    n_heldout: int
    positives: float
    data: str
    #: the linear probe on the erased rows *before* renormalisation (diagnostic: erasure
    #: equalises the class means, but scaling rows back to unit length, as every normalising
    #: mechanism does next, can make them differ again)
    linear_after_unnormalised: float | None = None

    def readable(self, threshold: float = READABLE_AUC) -> list[str]:
        """One line per probe that still reads the concept after erasure (AUC > threshold)."""
        out = []
        for name, before, after in (
            ("linear", self.linear_before, self.linear_after),
            ("non-linear (MLP)", self.mlp_before, self.mlp_after),
        ):
            if after is not None and after > threshold:
                out.append(
                    f"erasure leaves the concept readable: a {name} probe reads it at ROC AUC "
                    f"{after:.3f} on held-out {self.data} ({before:.3f} before erasure; 0.5 is "
                    "chance)"
                )
        raw = self.linear_after_unnormalised
        if out and raw is not None and raw <= threshold < self.linear_after:
            out.append(
                f"the erased rows before renormalisation give a linear probe only {raw:.3f}: "
                "scaling them back to unit length (as the mechanisms do) reintroduces the concept"
            )
        return out

    def describe(self) -> str:
        """One line with the four AUCs."""
        mlp = (
            "" if self.mlp_after is None else f", MLP {self.mlp_before:.3f} -> {self.mlp_after:.3f}"
        )
        return (
            f"held-out probe ROC AUC before -> after erasure: linear {self.linear_before:.3f} -> "
            f"{self.linear_after:.3f}{mlp} ({self.n_heldout} held-out of {self.data})"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def probe_aucs(
    X_fit: Any, y_fit: Any, X_test: Any, y_test: Any, *, mlp: bool = True, rng: Any = None
) -> tuple[float, float | None]:
    """ROC AUC of a logistic-regression probe and (``mlp``) an MLP probe, trained on the fitting
    rows and scored on the test rows (binary labels)."""
    require("sklearn", "learn", purpose="probing a concept")
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    seed = int(as_generator(rng).integers(2**31))
    Xf, Xt = np.asarray(X_fit, dtype=np.float64), np.asarray(X_test, dtype=np.float64)
    yf, yt = np.asarray(y_fit), np.asarray(y_test)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        lin = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000, C=1.0))
        lin.fit(Xf, yf)
        auc_lin = float(roc_auc_score(yt, lin.predict_proba(Xt)[:, 1]))
        auc_mlp = None
        if mlp:
            net = make_pipeline(
                StandardScaler(),
                MLPClassifier(
                    hidden_layer_sizes=(128,), max_iter=300, early_stopping=True,
                    random_state=seed,
                ),
            )  # fmt: skip
            net.fit(Xf, yf)
            auc_mlp = float(roc_auc_score(yt, net.predict_proba(Xt)[:, 1]))
    return auc_lin, auc_mlp


def _split(
    y: NDArray[Any], heldout: float, groups: NDArray[Any] | None, rng: Any
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Stratified (by label) fitting / held-out row indices; rows of one group stay together."""
    gen = as_generator(rng)
    keys = np.arange(y.size) if groups is None else np.asarray(groups)
    uniq, inv = np.unique(keys, return_inverse=True)
    # a group's label for stratification: its first row's
    first = np.zeros(uniq.size, dtype=np.int64)
    first[inv[::-1]] = np.arange(y.size)[::-1]
    g_label = y[first]
    test_groups = []
    for lab in np.unique(g_label):
        members = np.flatnonzero(g_label == lab)
        take = max(1, round(heldout * members.size))
        if take >= members.size:
            raise DataError(
                f"label {lab!r} has only {members.size} example(s): too few to hold some out."
            )
        test_groups.append(gen.choice(members, size=take, replace=False))
    is_test = np.isin(inv, np.concatenate(test_groups))
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def fit_checked(
    X: Any,
    labels: Any,
    *,
    heldout: float = 0.3,
    groups: Any = None,
    data: str = "labelled texts",
    mlp: bool = True,
    rng: Any = None,
    metadata: dict[str, Any] | None = None,
    method: str = "leace",
    **fit_kwargs: Any,
) -> tuple[ConceptEraser, ErasureCheck]:
    """Fit an eraser on part of a labelled sample and check it on the rest.

    Parameters
    ----------
    X : array_like, shape (n, d)
        Embeddings of the labelled texts (real text: the user's own sample, or texts labelled
        by :func:`concept_labels`).
    labels : array_like, shape (n,)
        Two classes (1: the concept is there).
    heldout : float in (0, 1), default 0.3
        Share held out (stratified by label) for the probes.
    groups : array_like, shape (n,), optional
        Rows that must fall on the same side (e.g. the two sides of a D+/D- pair).
    data : str
        What the rows are, for messages and the eraser's metadata.
    mlp : bool
        Also run the non-linear probe.
    rng : int, Generator or None
        The split and the MLP's initialisation.
    method : {"leace", "iterative"}, default "leace"
        ``"leace"``: one LEACE fit (:meth:`ConceptEraser.fit`). ``"iterative"``:
        :func:`fit_iterative` (directions removed until a probe on the released unit rows of
        an inner validation split is near chance).

    Returns
    -------
    (ConceptEraser, ErasureCheck)
        The eraser fitted on the fitting split (the one checked), and the check, also stored in
        its metadata (``"check"``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.integers(0, 2, 600)
    >>> X = rng.standard_normal((600, 8)); X[:, 0] += 2.0 * z
    >>> er, check = fit_checked(X, z, mlp=False, rng=0)
    >>> check.linear_before > 0.8 > 0.6 > check.linear_after
    True
    >>> check.readable()
    []
    """
    A, _ = check_embeddings(X, name="X")
    y01 = _binary_labels(labels, A.shape[0])
    heldout = check_real("heldout", heldout, gt=0, lt=1)
    g = None if groups is None else np.asarray(groups)
    if g is not None and g.shape != (A.shape[0],):
        raise DataError(f"groups must be (n,) with n = {A.shape[0]}, got shape {g.shape}.")
    gen = as_generator(rng)
    fit_idx, test_idx = _split(y01, heldout, g, gen)
    meta = {"fitted_on": data, "n_fit": int(fit_idx.size), **(metadata or {})}
    method = check_choice("method", method, ("leace", "iterative"))
    if method == "iterative":
        g_fit = None if g is None else g[fit_idx]
        eraser = fit_iterative(
            A[fit_idx], y01[fit_idx], groups=g_fit, rng=gen, metadata=meta, **fit_kwargs
        )
    else:
        eraser = ConceptEraser.fit(A[fit_idx], y01[fit_idx], metadata=meta, **fit_kwargs)
    check = _probe_check(eraser, A, y01, fit_idx, test_idx, data=data, mlp=mlp, rng=gen)
    eraser.metadata["check"] = check.to_dict()
    return eraser, check


def _binary_labels(labels: Any, n: int) -> NDArray[np.int64]:
    """Two classes of labels for ``n`` rows as 0/1 (1: the larger of the two values)."""
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"labels must be (n,) with n = {n}, got shape {y.shape}.")
    classes = np.unique(y)
    if classes.size != 2:
        raise DataError(
            f"the held-out check needs 2 classes of labels, got {classes.size}: "
            f"{classes.tolist()[:5]}."
        )
    return (y == classes[1]).astype(np.int64)


def _probe_check(
    eraser: ConceptEraser,
    A: NDArray[Any],
    y01: NDArray[np.int64],
    fit_idx: NDArray[np.int64],
    test_idx: NDArray[np.int64],
    *,
    data: str,
    mlp: bool,
    rng: np.random.Generator,
) -> ErasureCheck:
    """Held-out probes on the unit rows before erasure, after it, and after it unnormalised."""
    R = np.asarray(eraser.transform(A, renormalize=False), dtype=np.float64)
    E = R / np.linalg.norm(R, axis=1, keepdims=True)  # as released: unit rows
    U = np.asarray(A, dtype=np.float64)
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    lin_b, mlp_b = probe_aucs(
        U[fit_idx], y01[fit_idx], U[test_idx], y01[test_idx], mlp=mlp, rng=rng
    )
    lin_a, mlp_a = probe_aucs(
        E[fit_idx], y01[fit_idx], E[test_idx], y01[test_idx], mlp=mlp, rng=rng
    )
    lin_raw, _ = probe_aucs(
        R[fit_idx], y01[fit_idx], R[test_idx], y01[test_idx], mlp=False, rng=rng
    )
    return ErasureCheck(
        linear_before=lin_b,
        linear_after=lin_a,
        mlp_before=mlp_b,
        mlp_after=mlp_a,
        n_fit=int(fit_idx.size),
        n_heldout=int(test_idx.size),
        positives=float(y01[test_idx].mean()),
        data=data,
        linear_after_unnormalised=lin_raw,
    )


def fit_iterative(
    X: Any,
    labels: Any,
    *,
    max_rank: int = 128,
    target_auc: float = 0.55,
    groups: Any = None,
    rng: Any = None,
    metadata: dict[str, Any] | None = None,
) -> ConceptEraser:
    r"""Remove concept directions one at a time until a linear probe on the *released* rows is
    near chance (iterative nullspace projection, after Ravfogel et al. 2020).

    LEACE equalises the class means, which makes every linear predictor no better than a
    constant in expected (convex) loss -- but not in ranking: on GCIDE definitions that name a
    disease, a held-out linear probe still ranked them at ROC AUC 0.97 after it. Here each
    round trains a logistic probe on the rows as they would be released (centred, projected off
    the directions found so far, scaled back to unit length) on an inner fitting split, scores
    it on an inner validation split, stops when that AUC is at most ``target_auc`` (or at
    ``max_rank`` directions), and otherwise adds the probe's direction (orthogonalised). The
    result is one affine map :math:`x - VV^\top(x - b)` (orthonormal V, b the mean), stored as
    a :class:`ConceptEraser`; it removes rank(V) directions, so check retrieval utility too.

    Raises
    ------
    DataError
        Labels that are not two classes, or too few of one for the inner split.
    """
    require("sklearn", "learn", purpose="fitting an iterative eraser")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    A, _ = check_embeddings(X, name="X")
    A = np.asarray(A, dtype=np.float64)
    y = np.asarray(labels)
    if y.shape != (A.shape[0],) or np.unique(y).size != 2:
        raise DataError("labels must be (n,) with two classes for an iterative eraser.")
    y = (y == np.unique(y)[1]).astype(np.int64)
    max_rank = int(max_rank)
    target_auc = check_real("target_auc", target_auc, gt=0.5, lt=1)
    g = None if groups is None else np.asarray(groups)
    inner_fit, inner_val = _split(y, 0.3, g, rng)
    b = A.mean(axis=0)
    V = np.zeros((A.shape[1], 0))
    aucs = []
    with warnings.catch_warnings():
        from sklearn.exceptions import ConvergenceWarning

        warnings.simplefilter("ignore", ConvergenceWarning)
        for _ in range(max_rank + 1):
            E = A - ((A - b) @ V) @ V.T
            E /= np.linalg.norm(E, axis=1, keepdims=True)
            probe = LogisticRegression(max_iter=2000, C=1.0).fit(E[inner_fit], y[inner_fit])
            auc = float(roc_auc_score(y[inner_val], probe.decision_function(E[inner_val])))
            aucs.append(auc)
            if auc <= target_auc or V.shape[1] >= max_rank:
                break
            w = probe.coef_[0] - V @ (V.T @ probe.coef_[0])
            V = np.c_[V, w / np.linalg.norm(w)]
    meta = {
        "method": "iterative (probe directions on released unit rows)",
        "n": int(A.shape[0]),
        "inner_validation_auc": aucs[-1],
        "rounds": len(aucs),
        **(metadata or {}),
    }
    if V.shape[1] == 0:
        raise DataError(
            f"the concept is not linearly readable to begin with (inner validation AUC "
            f"{aucs[0]:.3f} <= {target_auc}): nothing to erase."
        )
    return ConceptEraser(V, V.T.copy(), b, metadata=meta)


def concept_labels(texts: Sequence[str], concept: Any, *, nlp: Any = None) -> NDArray[np.int64]:
    """1 for each text in which the concept occurs (a token, pattern or entity span), else 0.

    Real texts labelled this way (definitions that mention a disease vs not) are what an
    eraser should be fitted on.
    """
    from .pairs import ConceptMatcher

    matcher = ConceptMatcher(concept, nlp=nlp)
    return np.array([1 if s else 0 for s in matcher.spans_many(list(texts))], dtype=np.int64)


def learn_eraser(
    texts: Sequence[str],
    concept: Any,
    *,
    labels: Any = None,
    pairs: bool = False,
    source: str = "texts",
    embedder: Any = None,
    model: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    nlp: Any = None,
    heldout: float = 0.3,
    mlp: bool = True,
    method: str = "leace",
    rng: Any = None,
) -> tuple[ConceptEraser, ErasureCheck]:
    """Embed labelled texts, fit an eraser on part of them and check it on the rest.

    * ``labels`` given: the user's own labelled sample (two classes);
    * ``pairs=False`` (real text, the default): each text is labelled by whether the concept
      occurs in it (:func:`concept_labels`) -- e.g. definitions that mention a disease vs
      not;
    * ``pairs=True``: D+/D- pairs built from the texts (generated sentences); the two sides of
      a pair stay on the same side of the split. Labelled as such in the eraser's metadata:
      such an eraser may erase nothing a probe reads on real text.

    Returns the eraser and its :class:`ErasureCheck` (see :func:`fit_checked`).

    Raises
    ------
    DataError
        Too few texts of a class (or pairs) to fit and hold some out.
    """
    from .cache import embed_texts

    texts = list(texts)
    if embedder is None:
        from ..data.embedders import Embedder

        embedder = Embedder(model)
    emb = embedder.metadata()
    meta = {
        "concept": getattr(concept, "name", str(concept)),
        "embedding_model": emb.get("embedding_model") or emb.get("model_id"),
    }
    groups = None
    if pairs:
        from .pairs import build_pairs

        ps = build_pairs(texts, concept, nlp=nlp)
        if len(ps) < 4:
            raise DataError(f"only {len(ps)} D+/D- pairs could be built: too few for an eraser.")
        rows = [*ps.positives, *ps.negatives]
        y = np.r_[np.ones(len(ps), dtype=np.int64), np.zeros(len(ps), dtype=np.int64)]
        groups = np.r_[np.arange(len(ps)), np.arange(len(ps))]
        data = f"generated sentences (D+/D- pairs from {source})"
    else:
        rows = texts
        y = concept_labels(texts, concept, nlp=nlp) if labels is None else np.asarray(labels)
        how = "labels given" if labels is not None else "labelled by the concept's occurrence"
        data = f"real texts ({source}; {how})"
        if y.shape != (len(rows),):
            raise DataError(f"labels has {y.shape[0]} entries but there are {len(rows)} texts.")
    X = embed_texts(rows, embedder=embedder, cache_dir=cache_dir, use_cache=use_cache)
    return fit_checked(
        X, y, heldout=heldout, groups=groups, data=data, mlp=mlp, rng=rng, metadata=meta,
        method=method,
    )  # fmt: skip


def load_eraser(eraser: ConceptEraser | str | Path) -> ConceptEraser:
    """A :class:`ConceptEraser` from itself, its file, or a concept profile with one beside it
    (:func:`eraser_path`): the pre-noise step to hand to ``protect_file(eraser=...)``.

    Raises
    ------
    FileNotFoundError
        No such file.
    privembed.DataError
        The file is neither an eraser nor a profile with one beside it.
    """
    if isinstance(eraser, ConceptEraser):
        return eraser
    p = Path(eraser)
    if not p.exists():
        raise FileNotFoundError(f"eraser not found: {p}")
    beside = eraser_path(p)
    if beside.is_file():
        return ConceptEraser.load(beside)
    try:
        return ConceptEraser.load(p)
    except DataError:
        raise DataError(
            f"{p} is neither a concept eraser nor a profile with one beside it ({beside.name}); "
            "fit one with 'privembed concept learn --eraser'."
        ) from None
