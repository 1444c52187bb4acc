r"""The subspace basis: the pre-processing step :math:`x \mapsto P_k(x - \mu)`, its files and
its exact PCA from public data.

:class:`SubspaceBasis` holds orthonormal components (checked, and scaled so that
:math:`\|P\|_2 \le 1`), a centre, a spectrum and where it came from. The step is 1-Lipschitz in
l2, the metric it preserves: a d_X guarantee stated after it holds before it. A basis from
**public** text (:meth:`SubspaceBasis.from_embeddings`) costs no privacy; one computed from the
private corpus comes from :func:`privembed.mechanisms.dp_pca.dp_pca` and carries its central
guarantee. :meth:`SubspaceBasis.save` / :meth:`SubspaceBasis.load` keep it in an ``.npz`` file
(it holds the key holder's projection: keep it inside the trust boundary). The mechanism that
adds noise after the step is :class:`privembed.mechanisms.subspace.SubspaceMechanism`.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.accounting import ApproxDP
from .base import unit_rows

__all__ = ["BASIS_FORMAT", "SubspaceBasis", "leading_components", "orthonormal_rows"]

BASIS_FORMAT = "privembed.subspace-basis/1"
#: rows of a basis must be orthonormal to this tolerance (max |P P^T - I|)
_ORTHO_TOL = 1e-6


def leading_components(
    C: NDArray[np.float64], max_components: int | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The leading eigenvectors of a covariance ``C`` (d, d) as rows, by decreasing eigenvalue,
    and those eigenvalues: ``max_components`` of them (default all d). ``C`` is symmetrised
    first (a noisy or rounded one need not be exactly symmetric)."""
    d = C.shape[0]
    vals, vecs = np.linalg.eigh((C + C.T) / 2.0)
    order = np.argsort(vals)[::-1]
    m = d if max_components is None else check_int("max_components", max_components, ge=1, le=d)
    return vecs[:, order[:m]].T, vals[order[:m]]


def orthonormal_rows(P: Any, name: str = "basis") -> NDArray[np.float64]:
    """``P`` as float64 (k, d) with orthonormal rows (checked), scaled so that ||P||_2 <= 1."""
    A = np.asarray(P, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise DataError(f"{name} must be a (k, d) array of k >= 1 rows, got shape {A.shape}.")
    if not np.isfinite(A).all():
        raise DataError(f"{name} has NaN or inf entries.")
    if A.shape[0] > A.shape[1]:
        raise DataError(f"{name} has {A.shape[0]} rows in dimension {A.shape[1]}: k must be <= d.")
    err = float(np.max(np.abs(A @ A.T - np.eye(A.shape[0]))))
    if not err <= _ORTHO_TOL:
        raise DataError(
            f"{name} rows must be orthonormal (P P^T = I): max |P P^T - I| = {err:.3g} > "
            f"{_ORTHO_TOL:g}."
        )
    # the guarantee rests on ||P||_2 <= 1: rows that stretch by more than the rounding of the
    # norm's own computation (1e-12; float32 rows are off by ~1e-7) are scaled back. Scaling
    # is idempotent above that slack, so a basis rebuilt from its stored rows is bit-identical.
    top = float(np.linalg.norm(A, 2))
    return A / top if top > 1.0 + 1e-12 else A


class SubspaceBasis:
    r"""An orthonormal basis with a centre: the pre-processing step :math:`x \mapsto P_k(x - \mu)`.

    Parameters
    ----------
    components : array_like, shape (m, d)
        Orthonormal rows, in decreasing order of the variance they carry.
    mean : array_like, shape (d,), optional
        The centre :math:`\mu` (default: zero).
    spectrum : array_like, shape (m,), optional
        Variance along each component (for a DP-PCA basis: the noisy estimate). Needed to
        choose k from theory (:func:`subspace_dimension`).
    guarantee : ApproxDP, optional
        The central DP guarantee of the basis release (DP-PCA); ``None`` for a basis from
        public data, which costs no privacy.
    noise_floor : float, default 0
        For DP-PCA, the scale of the released matrix' noise in the covariance (its
        eigenvalues within about twice this are indistinguishable from noise).
    n_records : int, optional
        Records the basis was computed from.
    metadata : dict, optional
        Where it came from (corpus, embedding model ...).

    Notes
    -----
    The step is 1-Lipschitz in l2: :math:`\|P(x-\mu) - P(x'-\mu)\| \le \|x - x'\|` because
    :math:`\|P\|_2 = 1` (orthonormal rows; the constructor checks them and scales away any
    rounding above 1). A d_X guarantee per unit of l2 distance after the step therefore holds
    per unit of l2 distance between the inputs.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((500, 6)) * [3, 2, 1, 0.1, 0.1, 0.1]
    >>> b = SubspaceBasis.from_embeddings(X)
    >>> b.components.shape, bool(b.spectrum[0] > b.spectrum[-1])
    ((6, 6), True)
    >>> b.transform(X[:2], 3).shape
    (2, 3)
    >>> b.lipschitz
    1.0
    """

    #: what the step preserves (a contraction keeps d_X guarantees stated in l2)
    metric = "l2 (1-Lipschitz: orthonormal rows)"
    lipschitz = 1.0

    def __init__(
        self,
        components: Any,
        mean: Any = None,
        *,
        spectrum: Any = None,
        guarantee: ApproxDP | None = None,
        noise_floor: float = 0.0,
        n_records: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.components = orthonormal_rows(components, "components")
        d = self.components.shape[1]
        mu = np.zeros(d) if mean is None else np.asarray(mean, dtype=np.float64)
        if mu.shape != (d,) or not np.isfinite(mu).all():
            raise DataError(f"mean must be a finite ({d},) array, got shape {mu.shape}.")
        self.mean = mu
        if spectrum is None:
            self.spectrum: NDArray[np.float64] | None = None
        else:
            s = np.asarray(spectrum, dtype=np.float64)
            if s.shape != (self.components.shape[0],) or not np.isfinite(s).all():
                raise DataError(
                    f"spectrum must be a finite ({self.components.shape[0]},) array, got "
                    f"shape {s.shape}."
                )
            self.spectrum = s
        if guarantee is not None and not isinstance(guarantee, ApproxDP):
            raise TypeError(f"guarantee must be an ApproxDP or None, got guarantee={guarantee!r}.")
        self.guarantee = guarantee
        self.noise_floor = check_real("noise_floor", noise_floor, ge=0)
        self.n_records = None if n_records is None else check_int("n_records", n_records, ge=1)
        self.metadata = dict(metadata or {})

    # ---- facts -------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Input dimension d."""
        return int(self.components.shape[1])

    @property
    def size(self) -> int:
        """Number of components m (the largest k)."""
        return int(self.components.shape[0])

    @property
    def source(self) -> str:
        """``"dp-pca"`` (a private corpus, charged) or ``"public"``."""
        return "public" if self.guarantee is None else "dp-pca"

    @property
    def digest(self) -> str:
        """SHA-256 of the components and the mean (identifies the basis)."""
        h = hashlib.sha256(BASIS_FORMAT.encode() + b"\0")
        for a in (self.components, self.mean):
            h.update(repr(a.shape).encode() + np.ascontiguousarray(a, dtype="<f8").tobytes())
        return h.hexdigest()

    @property
    def signal_components(self) -> int:
        """Components that carry the data rather than noise: for a DP-PCA basis those whose
        eigenvalue stands above twice its noise floor (the cap of :func:`subspace_dimension`;
        beyond it the directions are the noise's), else all of them."""
        if self.spectrum is None or self.noise_floor <= 0:
            return self.size
        return int(np.sum(self.spectrum > 2.0 * self.noise_floor))

    def too_few(self, k: int, need: int, what: str) -> str:
        """What to say when a subspace of ``k`` dimensions from this basis is too small for
        ``what`` (which needs ``need``): where k came from and what would give more.

        Examples
        --------
        >>> b = SubspaceBasis(np.eye(4)[:2], np.zeros(4))
        >>> print(b.too_few(2, 3, "the --recall profile"))  # doctest: +NORMALIZE_WHITESPACE
        the subspace has k=2 dimension(s) and the --recall profile needs >= 3: the public basis
        has 2 component(s); give one with more components.
        """
        head = f"the subspace has k={k} dimension(s) and {what} needs >= {need}"
        kept = self.signal_components
        if kept >= need:  # the balance rule kept fewer: the noise at this epsilon
            return (
                f"{head}: at this epsilon the noise leaves {k} of the basis' {kept} usable "
                f"components worth keeping; raise --epsilon, or set k (-p k={need})."
            )
        g = self.guarantee
        if g is None:
            return (
                f"{head}: the public basis has {self.size} component(s); give one with more "
                "components."
            )
        rows = "" if self.n_records is None else f" from {self.n_records:,} rows"
        return (
            f"{head}: DP-PCA at epsilon_p={g.epsilon:g} kept {kept} component(s) above its noise "
            f"floor{rows}; raise --basis-epsilon, give more rows, or use a public basis "
            "(--basis PUBLIC_DATA: embeddings of text that may be published)."
        )

    def describe(self) -> str:
        """One line: where the basis comes from and what it costs."""
        if self.guarantee is None:
            return f"public basis ({self.size} components, d={self.dim}): no privacy cost"
        g = self.guarantee
        return (
            f"DP-PCA basis ({self.size} components, d={self.dim}, {self.n_records} records): "
            f"central ({g.epsilon:.4g}, {g.delta:.3g})-DP, charged once to every record"
        )

    def __repr__(self) -> str:
        return f"SubspaceBasis(source={self.source!r}, size={self.size}, dim={self.dim})"

    def transform(self, X: Any, k: int | None = None) -> NDArray[np.float64]:
        """:math:`P_k(x - \\mu)` of each row of ``X`` (rows as given: no normalisation)."""
        arr, single = check_embeddings(X, dim=self.dim, allow_zero=True)
        k = self.size if k is None else check_int("k", k, ge=1, le=self.size)
        out = (np.asarray(arr, dtype=np.float64) - self.mean) @ self.components[:k].T
        return out[0] if single else out

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def from_embeddings(
        cls,
        X: Any,
        *,
        max_components: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SubspaceBasis:
        """Exact PCA of **public** embeddings (rows normalised to unit length first).

        Use only data that may be published: the basis is not charged to anyone.
        """
        A, _ = check_embeddings(X, name="public embeddings")
        if A.ndim != 2 or A.shape[0] < 2:
            raise DataError("public embeddings must be an (n, d) array with n >= 2 rows.")
        U = unit_rows(np.asarray(A, dtype=np.float64))
        mean = U.mean(axis=0)
        C = (U - mean).T @ (U - mean) / U.shape[0]
        components, spectrum = leading_components(C, max_components)
        meta = {"source": "public", "n": int(U.shape[0]), **(metadata or {})}
        return cls(
            components,
            mean,
            spectrum=np.maximum(spectrum, 0.0),
            n_records=int(U.shape[0]),
            metadata=meta,
        )

    # ---- files -------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The basis as an ``.npz`` archive (what :meth:`save` writes)."""
        meta = {
            "format": BASIS_FORMAT,
            "guarantee": None if self.guarantee is None else self.guarantee.to_dict(),
            "noise_floor": self.noise_floor,
            "n_records": self.n_records,
            "metadata": self.metadata,
        }
        arrays: dict[str, Any] = {
            "basis": self.components,
            "mean": self.mean,
            "meta": np.array(json.dumps(meta, sort_keys=True)),
        }
        if self.spectrum is not None:
            arrays["spectrum"] = self.spectrum
        buf = _io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    def save(self, path: str | Path) -> Path:
        """Write the basis atomically (``.npz``: ``basis``, ``mean``, ``spectrum``, ``meta``).

        It holds the key holder's projection: keep it inside the trust boundary.
        """
        from ..data.io import atomic_output

        p = Path(path)
        with atomic_output(p) as tmp:
            tmp.write_bytes(self.to_bytes())
        return p

    @classmethod
    def from_bytes(cls, blob: bytes, *, name: str = "basis") -> SubspaceBasis:
        """Read what :meth:`to_bytes` wrote."""
        from ..core.accounting import guarantee_from_dict

        try:
            with np.load(_io.BytesIO(blob), allow_pickle=False) as z:
                if "basis" not in z.files or "meta" not in z.files:
                    raise DataError(f"{name} is not a subspace basis (no 'basis'/'meta' arrays).")
                meta = json.loads(str(z["meta"]))
                if meta.get("format") != BASIS_FORMAT:
                    raise DataError(f"{name}: unknown basis format {meta.get('format')!r}.")
                g = meta.get("guarantee")
                guarantee = None if g is None else guarantee_from_dict(g)
                return cls(
                    z["basis"],
                    z["mean"] if "mean" in z.files else None,
                    spectrum=z["spectrum"] if "spectrum" in z.files else None,
                    guarantee=guarantee,  # type: ignore[arg-type]
                    noise_floor=float(meta.get("noise_floor") or 0.0),
                    n_records=meta.get("n_records"),
                    metadata=meta.get("metadata") or {},
                )
        except DataError:
            raise
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"cannot read {name}: {str(exc).splitlines()[0]}") from None

    @classmethod
    def load(cls, path: str | Path) -> SubspaceBasis:
        """Read a basis written by :meth:`save`."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"basis not found: {p}")
        return cls.from_bytes(p.read_bytes(), name=str(p))

    @staticmethod
    def is_basis_file(path: str | Path) -> bool:
        """Whether ``path`` is a basis written by :meth:`save` (an ``.npz`` with its format)."""
        p = Path(path)
        if not p.is_file():
            return False
        try:
            with np.load(p, allow_pickle=False) as z:
                return (
                    "meta" in z.files and json.loads(str(z["meta"])).get("format") == BASIS_FORMAT
                )
        except (OSError, ValueError, AttributeError):
            return False
