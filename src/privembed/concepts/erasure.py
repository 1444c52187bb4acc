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

Labels come from the concept tooling already here: :func:`privembed.concepts.build_pairs` gives
D+ (sentences with the concept) and D- (the same sentences with it removed); label 1 for D+ and
0 for D- (:meth:`ConceptEraser.from_pairs`). Any labels work: an int class per row (multi-class,
erasing a rank k - 1 subspace) or an (n, k) one-hot matrix.

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

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._optional import require
from .._validation import DataError, check_choice, check_embeddings
from ..io import atomic_output

__all__ = ["ERASER_FORMAT", "ConceptEraser", "eraser_path"]

ERASER_FORMAT = "privembed.concept-eraser/1"


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
        meta = {"labels": "D+ = 1, D- = 0", "n_pos": int(P.shape[0]), "n_neg": int(N.shape[0])}
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
        p = Path(path)
        arrays: dict[str, Any] = {
            "proj_left": self.proj_left,
            "proj_right": self.proj_right,
            "metadata": np.array(json.dumps({"format": ERASER_FORMAT, **self.metadata})),
        }
        if self.bias is not None:
            arrays["bias"] = self.bias
        with atomic_output(p) as tmp, tmp.open("wb") as fh:
            np.savez(fh, **arrays)
        return p

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
                meta = json.loads(str(z["metadata"])) if "metadata" in z.files else {}
                fmt = meta.pop("format", ERASER_FORMAT)
                if fmt != ERASER_FORMAT:
                    raise DataError(f"{p}: unknown eraser format {fmt!r}.")
                bias = z["bias"] if "bias" in z.files else None
                return cls(z["proj_left"], z["proj_right"], bias, metadata=meta)
        except (OSError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"cannot read eraser {p}: {str(exc).splitlines()[0]}") from None
