r"""A private subspace before the noise: project onto k directions, then add noise in k dimensions.

Noise in the full embedding space swamps the signal: multivariate Laplace noise in d = 384
dimensions has radius Gamma(384, 1/epsilon), mean 7.7 at epsilon = 50, against a unit vector.
An orthonormal projection :math:`P` (k x d, :math:`PP^\top = I_k`) is a contraction,
:math:`\|P(x - \mu) - P(x' - \mu)\| = \|P(x - x')\| \le \|x - x'\|`, so noise with an
epsilon-d_X guarantee in k dimensions added to :math:`P(x - \mu)` keeps the *same* per-record
guarantee in the original l2 metric, while its radius shrinks to Gamma(k, 1/epsilon) (mean 0.64
at k = 32, epsilon = 50). What the projection throws away is the part of each record outside
the subspace: the subspace must hold what retrieval needs, so it comes from the data's
principal components.

The pieces:

* :class:`SubspaceBasis` -- the pre-processing step :math:`x \mapsto P_k(x - \mu)` (its
  components, centre, spectrum and provenance). It is 1-Lipschitz in l2, which is the metric it
  preserves: any d_X guarantee stated after it holds before it. A basis either comes from
  **public text** (:meth:`SubspaceBasis.from_embeddings`, exact PCA: no privacy cost) or from
  the private corpus through **differentially private PCA** (:func:`dp_pca`), whose central
  (epsilon_p, delta_p) guarantee is charged once to every record it was computed from
  (:func:`charge_basis`, the ledger's public API).
* :class:`SubspaceMechanism` -- the basis composed with a noise law in k dimensions
  (``laplace``, ``gaussian`` or ``purkayastha``), on the :class:`~privembed.mechanisms.Mechanism`
  base (keyed noise, the ledger, blocks and threads for free).

**The guarantee, precisely.** For a record released once with a DP-PCA basis computed from a
corpus that contains it, two things are released about it: the basis (central (epsilon_p,
delta_p)-DP for datasets that differ in this one record, replaced by any unit vector; the basis
and mean are post-processed into P and mu) and its protected vector (per-record LDP/d_X of the
noise law, for *any* fixed basis). They compose: basic composition for pure/metric noise
(``2 epsilon + epsilon_p``, ``delta_p``), the PLD accountant for Gaussian noise (both are
Gaussian mechanisms). :attr:`SubspaceMechanism.guarantee` is the per-release part (what each
release charges); :meth:`SubspaceMechanism.composed_guarantee` states the composition and the
ledger holds both charges. With a public basis there is no second term.

**Where the basis lives.** The basis and mean stay with the key holder: a collection keeps them
sealed (AES-256-GCM, the payload key) beside the store, queries are projected on the client
(:meth:`SubspaceMechanism.public_transform`: the noise-free part :math:`P(q - \mu)`), the store
sees only k-dimensional protected vectors and sealed payloads, and exact re-ranking decrypts the
full d-dimensional vectors.

**Choosing k.** :func:`subspace_dimension` picks k from epsilon, the noise law and the basis'
spectrum (where the noise's energy catches up with the captured signal's), checked against
the k' rank model; :func:`privembed.search.rerank.best_subspace_dimension` picks it for a given k'
from sample queries; ``k=`` overrides both. For DP-PCA k never goes beyond the components that
stand above the noise floor of the released matrix (the rest are noise directions).

References
----------
.. [DTTZ14] Dwork, Talwar, Thakurta, Zhang (2014). Analyze Gauss: optimal bounds for
   privacy-preserving principal component analysis. STOC.
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
.. [A26] Asghar, Zhao, Carpentier, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs.
.. [D23] Du et al. (2023). Sanitizing sentence embeddings (and labels) for local differential
   privacy. WWW. (Purkayastha.)
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import math
from collections.abc import Iterable
from os import PathLike
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from ..core import theory
from ..core._validation import (
    DataError,
    check_choice,
    check_embeddings,
    check_int,
    check_noise_epsilon,
    check_real,
)
from ..core.accounting import ApproxDP, Cost, Guarantee, MetricDP, Neighbouring, PureDP, compose
from ..core.rng import NoiseSource, as_generator
from .base import Mechanism, canonical_params, unit_rows
from .laplace import sample_l2_laplace
from .purkayastha import purkayastha_angle_table

__all__ = [
    "BASIS_FORMAT",
    "NOISES",
    "BasisCharge",
    "NoisyMoments",
    "SecondMoments",
    "SubspaceBasis",
    "SubspaceMechanism",
    "basis_from",
    "charge_basis",
    "dp_pca",
    "dp_pca_sensitivity",
    "fit_basis",
    "subspace_dimension",
]

BASIS_FORMAT = "privembed.subspace-basis/1"
NOISES = ("laplace", "gaussian", "purkayastha")
#: rows of a basis must be orthonormal to this tolerance (max |P P^T - I|)
_ORTHO_TOL = 1e-6
#: weight of the sum of rows next to the second-moment matrix in DP-PCA's one Gaussian release
DEFAULT_MEAN_WEIGHT = 0.25


# ---------------------------------------------------------------------------------------------
# the basis: a pre-processing step with the metric it preserves
# ---------------------------------------------------------------------------------------------


def _orthonormal_rows(P: Any, name: str = "basis") -> NDArray[np.float64]:
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
        self.components = _orthonormal_rows(components, "components")
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
        vals, vecs = np.linalg.eigh((C + C.T) / 2.0)
        order = np.argsort(vals)[::-1]
        m = (
            U.shape[1]
            if max_components is None
            else check_int("max_components", max_components, ge=1, le=U.shape[1])
        )
        meta = {"source": "public", "n": int(U.shape[0]), **(metadata or {})}
        return cls(
            vecs[:, order[:m]].T,
            mean,
            spectrum=np.maximum(vals[order[:m]], 0.0),
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


# ---------------------------------------------------------------------------------------------
# differentially private PCA (Analyze Gauss with the mean)
# ---------------------------------------------------------------------------------------------


def dp_pca_sensitivity(mean_weight: float = DEFAULT_MEAN_WEIGHT) -> float:
    r"""l2 sensitivity of :math:`(a\sum_i x_i,\ \mathrm{upper}(\sum_i x_i x_i^\top))` when one
    unit row is replaced by another.

    For unit x, x' with :math:`c = x\cdot x'` the change is at most
    :math:`\sqrt{2a^2(1-c) + 2(1-c^2)}` (the upper triangle's norm is at most the Frobenius
    norm :math:`\sqrt{2 - 2c^2}` of :math:`xx^\top - x'x'^\top`); its maximum over c is
    :math:`\sqrt2(1 + a^2/2)` at :math:`c = -a^2/2` for :math:`a^2 \le 2`, and :math:`2a` beyond.

    Examples
    --------
    >>> round(dp_pca_sensitivity(0.0), 6) == round(math.sqrt(2), 6)
    True
    >>> round(dp_pca_sensitivity(0.25), 4)
    1.4584
    """
    a = check_real("mean_weight", mean_weight, ge=0)
    if a * a <= 2.0:
        return math.sqrt(2.0) * (1.0 + a * a / 2.0)
    return 2.0 * a


class SecondMoments:
    """Streaming sums of unit rows and of their outer products (inside the trust boundary).

    Rows are normalised to unit length as they are added (the sensitivity of :func:`dp_pca`
    assumes unit rows; the mechanism normalises its inputs the same way).
    """

    def __init__(self, d: int) -> None:
        self.d = check_int("d", d, ge=1)
        self.n = 0
        self.total = np.zeros(self.d)
        self.outer = np.zeros((self.d, self.d))

    def add(self, X: Any) -> None:
        """Add a batch of rows (shape (n, d) or (d,)); zero, NaN and inf rows are refused."""
        A, _ = check_embeddings(X, name="corpus", dim=self.d)
        U = unit_rows(np.atleast_2d(np.asarray(A, dtype=np.float64)))
        self.n += U.shape[0]
        self.total += U.sum(axis=0)
        self.outer += U.T @ U

    def release(
        self,
        *,
        epsilon: float,
        delta: float,
        mean_weight: float = DEFAULT_MEAN_WEIGHT,
        rng: Any = None,
    ) -> NoisyMoments:
        r"""The one Gaussian release of DP-PCA: :math:`(a s + g, \mathrm{upper}(M) + G)`.

        ``g`` and the upper triangle ``G`` (diagonal included) are i.i.d.
        :math:`\mathcal N(0, \sigma^2)` with sigma the analytic calibration of (epsilon,
        delta) at :func:`dp_pca_sensitivity`; the matrix is symmetrised from its upper
        triangle and the sum divided back by ``a`` (post-processing).

        Raises
        ------
        DataError
            Fewer than 2 rows.
        """
        epsilon = check_real("epsilon", epsilon, gt=0)
        delta = check_real("delta", delta, gt=0, lt=1)
        a = check_real("mean_weight", mean_weight, gt=0)
        if self.n < 2:
            raise DataError(f"DP-PCA needs at least 2 records, got {self.n}.")
        sens = dp_pca_sensitivity(a)
        sigma = theory.analytic_gaussian_sigma(epsilon, delta, sens)
        gen = as_generator(rng)
        total = self.total + gen.standard_normal(self.d) * (sigma / a)
        G = np.triu(gen.standard_normal((self.d, self.d)) * sigma)
        outer = self.outer + G + np.triu(G, 1).T
        return NoisyMoments(total, outer, self.n, epsilon, delta, a, sigma, sens)


class NoisyMoments:
    """The released (noisy) sum and second-moment matrix of DP-PCA, with their calibration."""

    def __init__(
        self,
        total: NDArray[np.float64],
        outer: NDArray[np.float64],
        n: int,
        epsilon: float,
        delta: float,
        mean_weight: float,
        sigma: float,
        sensitivity: float,
    ) -> None:
        self.total, self.outer, self.n = total, outer, n
        self.epsilon, self.delta = epsilon, delta
        self.mean_weight, self.sigma, self.sensitivity = mean_weight, sigma, sensitivity

    @property
    def guarantee(self) -> ApproxDP:
        """Central (epsilon, delta)-DP of the release, with its noise multiplier."""
        return ApproxDP(
            self.epsilon,
            self.delta,
            neighbouring="corpora of the same size that differ in one record, replaced by any "
            "unit vector (central DP of the basis release)",
            note=f"DP-PCA (Analyze Gauss with the mean, weight {self.mean_weight:g}): Gaussian "
            f"noise sigma={self.sigma:.4g} on the sum and second-moment matrix of {self.n} unit "
            f"rows, sensitivity {self.sensitivity:.4g}; analytic calibration (Balle & Wang 2018)",
            relation=Neighbouring.RECORD,
            noise_multiplier=self.sigma / self.sensitivity,
        )

    def basis(
        self, *, max_components: int | None = None, metadata: dict[str, Any] | None = None
    ) -> SubspaceBasis:
        """Mean, covariance and its leading eigenvectors (post-processing of the release)."""
        d, n = self.total.size, self.n
        mean = self.total / n
        C = self.outer / n - np.outer(mean, mean)
        vals, vecs = np.linalg.eigh((C + C.T) / 2.0)
        order = np.argsort(vals)[::-1]
        m = d if max_components is None else check_int("max_components", max_components, ge=1, le=d)
        meta = {
            "source": "dp-pca",
            "n": n,
            "mean_weight": self.mean_weight,
            "sigma": self.sigma,
            **(metadata or {}),
        }
        return SubspaceBasis(
            vecs[:, order[:m]].T,
            mean,
            spectrum=vals[order[:m]],
            guarantee=self.guarantee,
            noise_floor=math.sqrt(d) * self.sigma / n,
            n_records=n,
            metadata=meta,
        )


def dp_pca(
    corpus: Any,
    *,
    epsilon: float,
    delta: float,
    max_components: int | None = None,
    mean_weight: float = DEFAULT_MEAN_WEIGHT,
    rng: Any = None,
    metadata: dict[str, Any] | None = None,
) -> SubspaceBasis:
    r"""A basis from the private corpus by differentially private PCA ([DTTZ14], with the mean).

    One Gaussian mechanism releases the sum of the unit rows and the upper triangle of their
    second-moment matrix together (:meth:`SecondMoments.release`),

    .. math:: \big(a\textstyle\sum_i x_i + g,\ \mathrm{upper}(\sum_i x_i x_i^\top) + G\big),
       \qquad g, G \sim \mathcal N(0, \sigma^2),

    with sigma the analytic calibration ([BW18]) of (epsilon, delta) at the sensitivity of
    :func:`dp_pca_sensitivity` (replace-one neighbouring: corpora of the same size that differ
    in one record, replaced by any unit vector; the number of records is public). The mean is
    the noisy sum / (a n), the covariance the noisy second moment / n minus the mean's outer
    product, and the basis its leading eigenvectors -- post-processing, so the whole basis is
    (epsilon, delta)-DP.

    Parameters
    ----------
    corpus : array_like (n, d) or SecondMoments
        The private corpus' embeddings (normalised to unit rows here), or their sums.
    epsilon, delta : float
        Central DP parameters of the basis release.
    max_components : int, optional
        Components kept (default: all d).
    mean_weight : float, default 0.25
        ``a`` above: how the one release splits its noise between the mean and the matrix
        (the mean's noise per coordinate is sigma / (a n); a = 0.25 costs the matrix 3% more
        noise than no mean at all).
    rng : int, Generator or None

    Returns
    -------
    SubspaceBasis
        With :attr:`~SubspaceBasis.guarantee` = ApproxDP(epsilon, delta, noise multiplier
        sigma / sensitivity) and :attr:`~SubspaceBasis.noise_floor` = sqrt(d) sigma / n, the
        scale of the noise matrix' eigenvalues in the covariance (about twice it is the edge
        of their semicircle).

    Raises
    ------
    DataError
        Fewer than 2 rows.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((20_000, 8)) * [4, 3, 1, 1, 1, 1, 1, 1]
    >>> b = dp_pca(X, epsilon=1.0, delta=1e-5, rng=1)
    >>> b.source, b.guarantee.epsilon, bool(abs(b.components[0, 0]) > 0.99)
    ('dp-pca', 1.0, True)
    """
    if isinstance(corpus, SecondMoments):
        acc = corpus
    else:
        A, _ = check_embeddings(corpus, name="corpus")
        if A.ndim != 2:
            raise DataError("corpus must be an (n, d) array.")
        acc = SecondMoments(A.shape[1])
        acc.add(A)
    released = acc.release(epsilon=epsilon, delta=delta, mean_weight=mean_weight, rng=rng)
    return released.basis(max_components=max_components, metadata=metadata)


# ---------------------------------------------------------------------------------------------
# the ledger charge of a DP-PCA basis
# ---------------------------------------------------------------------------------------------


class BasisCharge:
    """What the ledger stages for a DP-PCA basis: its central guarantee, once per record.

    The ledger composes it with the records' own releases (same relation: the whole record
    may change). Staged with the basis digest as each record's tag, so charging the *same*
    basis again (a saved basis reused for another collection) is free -- it is the same
    release -- while a recomputed basis (new noise) is charged again.
    """

    name = "subspace-basis"

    def __init__(self, basis: SubspaceBasis) -> None:
        if not isinstance(basis, SubspaceBasis):
            raise TypeError(f"basis must be a SubspaceBasis, got basis={basis!r}.")
        if basis.guarantee is None:
            raise ValueError("a public basis costs no privacy; there is nothing to charge.")
        self.basis = basis

    @property
    def guarantee(self) -> Guarantee:
        return self.basis.guarantee  # type: ignore[return-value]

    @property
    def fingerprint(self) -> str:
        return self.basis.digest

    @property
    def config(self) -> dict[str, Any]:
        g = self.basis.guarantee
        assert g is not None
        return {
            "mechanism": self.name,
            "source": "dp-pca",
            "epsilon": g.epsilon,
            "delta": g.delta,
            "components": self.basis.size,
            "dim": self.basis.dim,
            "n_records": self.basis.n_records,
            "digest": self.basis.digest[:16],
        }

    def __repr__(self) -> str:
        g = self.basis.guarantee
        assert g is not None
        return f"BasisCharge(dp-pca, epsilon={g.epsilon:g}, delta={g.delta:g})"


def charge_basis(
    ledger: Any,
    basis: SubspaceBasis,
    ids: Iterable[Any],
    *,
    subject: str | None = None,
    destination: str | None = None,
    with_next_release: bool = False,
) -> dict[str, Any]:
    """Charge a DP-PCA basis to every record it was computed from (one ledger release).

    ``ids`` are the corpus' record ids (typed as elsewhere: ``1`` and ``"1"`` differ). The
    charge is committed (budgets checked) and marked published before the basis is used.

    ``with_next_release``: the charge is staged now and committed in the transaction of the
    next release the ledger commits -- the first release made with the basis
    (:meth:`privembed.keys.ledger.Ledger.defer`) -- so the basis and that release are one unit:
    a command that is refused or fails before it commits a release records neither (the basis,
    never used, was never released). ``fresh`` and ``free`` are then None.

    Returns
    -------
    dict
        ``records``, ``fresh`` (charged now), ``free`` (this basis was charged before),
        ``batch``.

    Raises
    ------
    privembed.keys.ledger.BudgetExceeded
        A record (or the subject) would pass its budget: nothing is recorded.
    """
    from ..keys.ledger import record_key

    charge = BasisCharge(basis)  # refuses a public basis before the ledger is touched
    staged = ledger.stage(charge, subject=subject, destination=destination)
    tag = "basis:" + basis.digest
    try:
        chunk: list[str] = []
        for i in ids:
            chunk.append(record_key(i))
            if len(chunk) >= 8192:
                staged.add(chunk, tags=[tag] * len(chunk))
                chunk = []
        if chunk:
            staged.add(chunk, tags=[tag] * len(chunk))
        if staged.count != basis.n_records:
            raise DataError(
                f"the basis was computed from {basis.n_records} records but {staged.count} ids "
                "were given to charge."
            )
        if with_next_release:
            ledger.defer(staged)
            return {"records": staged.count, "fresh": None, "free": None, "batch": staged.batch}
        staged.commit()
        staged.mark_published()
    except BaseException:
        if not staged.committed:
            staged.discard()
        raise
    return {
        "records": staged.count,
        "fresh": staged.fresh,
        "free": staged.count - staged.fresh,
        "batch": staged.batch,
    }


# ---------------------------------------------------------------------------------------------
# choosing k
# ---------------------------------------------------------------------------------------------


def _noise_to_signal(noise: str, epsilon: float, sigma: float, k: int, signal: float) -> float:
    """E|z|^2 / |v|^2 in k dimensions for a signal of energy ``signal`` (Purkayastha: the
    tangent-to-radial energy of its angle, 1/E[cos]^2 - 1, whatever the signal)."""
    if noise == "laplace":
        return k * (k + 1) / epsilon**2 / signal  # radius Gamma(k, 1/eps): E r^2 = k(k+1)/eps^2
    if noise == "gaussian":
        return k * sigma**2 / signal
    if k < 2:
        return 0.0
    c = theory.expected_cosine_purkayastha(epsilon, k)
    return 1.0 / max(c, 1e-12) ** 2 - 1.0


def subspace_dimension(
    spectrum: Any,
    *,
    noise: str,
    epsilon: float,
    sigma: float = 0.0,
    noise_floor: float = 0.0,
    max_k: int | None = None,
) -> int:
    r"""The k at which the noise's energy catches up with the signal's (a balance rule).

    Each component added to the subspace brings signal (its variance :math:`\lambda_i`, the
    spectrum) and noise (for Laplace noise the radius is Gamma(k, 1/eps), so
    :math:`E\|z\|^2 = k(k+1)/\varepsilon^2` grows quadratically; Gaussian :math:`k\sigma^2`).
    While the captured signal energy :math:`S(k) = \sum_{i \le k} \lambda_i` exceeds the
    noise energy, a protected vector still points mostly along its record (cosine to it above
    :math:`1/\sqrt2`) and a larger subspace recovers more of the clean ranking; past that,
    noise dominates every score. The rule returns the smallest k with

    .. math:: E\|z_k\|^2 \ge S(k),

    (for Purkayastha, whose angle does not depend on the signal's length: the smallest k with
    :math:`E[\cos\theta] \le 1/\sqrt2`), capped at the spectrum's length, ``max_k``, and for
    a DP-PCA basis at the components whose eigenvalue stands above twice the noise floor
    (beyond it the directions are the noise's, not the data's).

    It is a rule of thumb checked against the k' rank model (:mod:`privembed.search.rerank`), not an
    optimum: on the GCIDE dev task (Laplace, 40,000 documents) the k that maximises the
    predicted recall of the true top 10 at k' = 5% of the corpus was 16, 32, 64, 128 at
    epsilon 25, 50, 100, 200 (exact PCA) and 12, 24, 48, 128 (DP-PCA, epsilon_p = 1); this
    rule gives 11, 28, 71, 170 and 11, 30, 68, 68 (``docs/retrieval.md``). With sample queries,
    :func:`privembed.search.rerank.best_subspace_dimension` picks k for a given k' directly.

    Parameters
    ----------
    spectrum : array_like
        Variance per component, decreasing.
    noise : {"laplace", "gaussian", "purkayastha"}
    epsilon : float
    sigma : float
        Gaussian noise standard deviation (``noise="gaussian"``).
    noise_floor : float
        :attr:`SubspaceBasis.noise_floor`.
    max_k : int, optional

    Examples
    --------
    >>> lam = 0.02 * 0.97 ** np.arange(384)
    >>> [subspace_dimension(lam, noise="laplace", epsilon=e) for e in (25.0, 50.0, 100.0)]
    [10, 32, 78]
    """
    lam = np.maximum(np.asarray(spectrum, dtype=np.float64), 0.0)
    noise = check_choice("noise", noise, NOISES)
    epsilon = check_real("epsilon", epsilon, gt=0)
    if lam.ndim != 1 or lam.size < 1:
        raise DataError(f"spectrum must be a non-empty 1-D array, got shape {lam.shape}.")
    top = lam.size if max_k is None else min(lam.size, check_int("max_k", max_k, ge=1))
    if noise_floor > 0:
        top = max(1, min(top, int(np.sum(lam > 2.0 * noise_floor))))
    cum = np.cumsum(lam)
    low = 2 if noise == "purkayastha" else 1
    for k in range(low, top + 1):
        if cum[k - 1] <= 0 or _noise_to_signal(noise, epsilon, sigma, k, cum[k - 1]) >= 1.0:
            return max(k, min(low, top))
    return top


# ---------------------------------------------------------------------------------------------
# the noise laws in k dimensions (one small class each)
# ---------------------------------------------------------------------------------------------


class _Noise:
    name: ClassVar[str]

    def __init__(self, m: SubspaceMechanism) -> None:
        self.m = m

    def perturb(self, V: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        raise NotImplementedError

    def guarantee(self, basis_note: str) -> Guarantee:
        raise NotImplementedError

    def cosines(self, norms: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.float64]:
        """cos(v, release) for signals v of the given norms (one draw each)."""
        raise NotImplementedError

    def _radial(
        self, radius: NDArray[np.float64], norms: NDArray[np.float64], rng: np.random.Generator
    ) -> NDArray[np.float64]:
        k = self.m.k
        g = rng.standard_normal(radius.size)
        a = g / np.sqrt(g * g + rng.chisquare(k - 1, radius.size)) if k > 1 else np.sign(g)
        rho = radius / np.maximum(norms, 1e-300)
        return (1.0 + rho * a) / np.sqrt(1.0 + 2.0 * rho * a + rho * rho)


class _Laplace(_Noise):
    name = "laplace"

    def perturb(self, V: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        Z = sample_l2_laplace(source, V.shape[0], V.shape[1], self.m.epsilon)
        Z += V
        return Z

    def guarantee(self, basis_note: str) -> Guarantee:
        m = self.m
        implied: tuple[Guarantee, ...] = ()
        if m.input_norm == "normalize":
            implied = (PureDP(2.0 * m.epsilon, neighbouring="any two unit vectors"),)
        elif m.input_norm == "clip":
            implied = (PureDP(2.0 * m.epsilon, neighbouring="any two vectors in the unit ball"),)
        return MetricDP(
            m.epsilon,
            metric="l2",
            implied=implied,
            note=f"l2 Laplace noise in k={m.k} dimensions on P(x - mean), P orthonormal "
            f"(a contraction of l2); {basis_note}",
        )

    def cosines(self, norms: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.float64]:
        r = rng.standard_gamma(float(self.m.k), norms.size) / self.m.epsilon
        return self._radial(r, norms, rng)


class _Gaussian(_Noise):
    name = "gaussian"

    def perturb(self, V: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        Z = source.normal(V.shape[0], V.shape[1])
        Z *= self.m.sigma
        Z += V
        return Z

    def guarantee(self, basis_note: str) -> Guarantee:
        m = self.m
        dom = "unit vectors" if m.input_norm == "normalize" else "vectors in the unit ball"
        return ApproxDP(
            m.epsilon,
            m.delta,  # type: ignore[arg-type]
            neighbouring=f"any two {dom} (l2 sensitivity of P(x - mean) is 2 ||P||_2 = 2)",
            note=f"Gaussian noise sigma={m.sigma:.4g} in k={m.k} dimensions, analytic "
            f"calibration (Balle & Wang 2018); {basis_note}",
            relation=Neighbouring.RECORD,
            noise_multiplier=m.sigma / 2.0,
        )

    def cosines(self, norms: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.float64]:
        r = self.m.sigma * np.sqrt(rng.chisquare(self.m.k, norms.size))
        return self._radial(r, norms, rng)


class _Purkayastha(_Noise):
    name = "purkayastha"

    def perturb(self, V: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        n, k = V.shape
        norms = np.sqrt(np.einsum("ij,ij->i", V, V))
        U = np.zeros_like(V)
        ok = norms > 0
        U[ok] = V[ok] / norms[ok, None]
        U[~ok, 0] = 1.0  # P(x - mean) = 0: a fixed direction (any direction is within pi)
        u = source.uniform(n, 2)
        theta = purkayastha_angle_table(self.m.epsilon, k).sample(u[:, 0], u[:, 1])
        w = source.normal(n, k)
        w -= np.einsum("ij,ij->i", w, U)[:, None] * U
        wn = np.sqrt(np.einsum("ij,ij->i", w, w))
        w *= (np.sin(theta) / np.where(wn > 0, wn, 1.0))[:, None]
        w += np.cos(theta)[:, None] * U
        return w

    def guarantee(self, basis_note: str) -> Guarantee:
        m = self.m
        return MetricDP(
            m.epsilon,
            metric="angular (great-circle distance between the centred projections "
            "P(x - mean)/|P(x - mean)|, radians)",
            implied=(PureDP(math.pi * m.epsilon, neighbouring="any two inputs"),),
            note=f"Purkayastha noise on the unit sphere of k={m.k} dimensions; {basis_note}",
        )

    def cosines(self, norms: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.float64]:
        table = purkayastha_angle_table(self.m.epsilon, self.m.k)
        return np.cos(table.sample(rng.random(norms.size), rng.random(norms.size)))


_NOISE_CLASSES: dict[str, type[_Noise]] = {c.name: c for c in (_Laplace, _Gaussian, _Purkayastha)}


# ---------------------------------------------------------------------------------------------
# the mechanism
# ---------------------------------------------------------------------------------------------


def _digest_refusal(param: str, value: Any) -> None:
    if isinstance(value, dict) and set(value) == {"sha256", "shape"}:
        raise ValueError(
            f"the subspace configuration records {param} only by its SHA-256 "
            f"({value['sha256'][:12]}...); pass {param}=ARRAY or the basis file."
        )


class SubspaceMechanism(Mechanism):
    r"""Noise in a private subspace: :math:`y = P_k(x - \mu) + z`, z in k dimensions.

    Inputs are normalised (or clipped) as for the other mechanisms, projected on the basis'
    first k components after subtracting its mean, and perturbed by one of three noise laws:

    * ``"laplace"``: density :math:`\propto e^{-\varepsilon\|z\|_2}` (radius Gamma(k, 1/eps));
      epsilon-d_X per unit of l2 distance **between the inputs** (P is a contraction), hence
      pure 2 epsilon-LDP on unit vectors -- the same charge as Laplace in d dimensions;
    * ``"gaussian"``: sigma calibrated to (epsilon, delta) at l2 sensitivity 2 (any two unit
      inputs: :math:`\|P(x - x')\| \le 2`), exactly as the full-dimension Gaussian;
    * ``"purkayastha"``: the direction :math:`P(x-\mu)/\|P(x-\mu)\|` perturbed on the unit
      sphere of k dimensions (angle law :math:`e^{-\varepsilon\theta}\sin^{k-2}\theta`): pure
      :math:`\pi\varepsilon`-LDP for any two inputs, d_X in the angle between the centred
      projections (*not* in the inputs' own angle: normalising after the projection is not a
      contraction).

    The released vectors have k coordinates. Compare queries with them through
    :meth:`public_transform` (:math:`P(q - \mu)`, no noise) -- it needs the basis, which the
    key holder keeps.

    Parameters
    ----------
    basis : SubspaceBasis, path of a saved basis, or array (m, d)
        The basis (orthonormal rows, decreasing variance). A bare array is taken as a basis
        from public data unless ``basis_epsilon``/``basis_delta`` say otherwise.
    epsilon : float, > 0
    noise : {"laplace", "gaussian", "purkayastha"}, default "laplace"
    k : int, optional
        Components used (default: :func:`subspace_dimension` from the basis' spectrum; all of
        them for a bare array without a spectrum).
    delta : float, optional
        Gaussian noise only.
    calibration : {"analytic", "classic"}, default "analytic"
        Gaussian noise only (as :class:`~privembed.mechanisms.GaussianMechanism`).
    mean : array_like (d,), optional
        The centre, for a bare-array basis (a basis object or file carries its own).
    basis_epsilon, basis_delta, basis_noise_multiplier : float, optional
        The central DP of a DP-PCA basis (read from a basis object or file; give them with a
        bare array computed by DP-PCA). ``None``: a public basis.
    input_norm : {"normalize", "clip", "none"}, default "normalize"
    renormalize : bool, default True

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((400, 16)) * np.r_[np.full(4, 3.0), np.ones(12)]
    >>> basis = SubspaceBasis.from_embeddings(X)            # public data
    >>> m = SubspaceMechanism(basis=basis, epsilon=20.0, k=4)
    >>> m.privatize(X[:3], rng=1).shape
    (3, 4)
    >>> m.guarantee.implied[0].epsilon
    40.0
    >>> m.public_transform(X[:3]).shape
    (3, 4)
    """

    name = "subspace"
    allowed_input_norms = ("normalize", "clip", "none")
    has_public_transform = True
    output_dim_param = "k"
    #: what the query side applies (query treatment): the key holder's projection, not public
    query_side = "the collection's own basis P (q - mean), sealed with the key, no noise; cosine"

    def __init__(
        self,
        *,
        basis: Any,
        epsilon: float,
        noise: str = "laplace",
        k: int | None = None,
        delta: float | None = None,
        calibration: str = "analytic",
        mean: Any = None,
        basis_epsilon: float | None = None,
        basis_delta: float | None = None,
        basis_noise_multiplier: float | None = None,
        input_norm: str = "normalize",
        renormalize: bool = True,
    ) -> None:
        self.noise = check_choice("noise", noise, NOISES)
        self.epsilon = check_noise_epsilon(epsilon)
        self._init_common(input_norm, renormalize)
        _digest_refusal("basis", basis)
        _digest_refusal("mean", mean)
        obj = self._basis_object(basis, mean)
        self._check_provenance(obj, basis_epsilon, basis_delta, basis_noise_multiplier)
        if self.noise == "gaussian":
            if delta is None:
                raise ValueError("noise='gaussian' needs delta, got delta=None.")
            self.delta: float | None = check_real("delta", delta, gt=0, lt=1)
            self.calibration = check_choice("calibration", calibration, ("analytic", "classic"))
            if self.input_norm == "none":
                raise ValueError(
                    "input_norm='none' bounds no distance between records; noise='gaussian' "
                    "needs input_norm='normalize' or 'clip', got input_norm='none'."
                )
            if self.calibration == "analytic":
                self.sigma = theory.analytic_gaussian_sigma(self.epsilon, self.delta, 2.0)
            else:
                self.sigma = theory.classic_gaussian_sigma(self.epsilon, self.delta, 2.0)
        else:
            if delta is not None:
                raise ValueError(f"delta applies to noise='gaussian' only, got delta={delta!r}.")
            if calibration != "analytic":
                raise ValueError(
                    f"calibration applies to noise='gaussian' only, got calibration={calibration!r}."
                )
            self.delta = None
            self.calibration = calibration
            self.sigma = 0.0
        if k is None:
            if obj.spectrum is None:
                self.k = obj.size
            else:
                self.k = subspace_dimension(
                    obj.spectrum,
                    noise=self.noise,
                    epsilon=self.epsilon,
                    sigma=self.sigma,
                    noise_floor=obj.noise_floor,
                )
        else:
            self.k = check_int("k", k, ge=1, le=obj.size)
        if self.noise == "purkayastha" and self.k < 2:
            raise ValueError(f"noise='purkayastha' needs k >= 2, got k={self.k}.")
        self.basis = obj.components[: self.k].copy()
        self.mean = obj.mean.copy()
        self.spectrum = None if obj.spectrum is None else obj.spectrum[: self.k].copy()
        self._law = _NOISE_CLASSES[self.noise](self)

    # ---- construction helpers ------------------------------------------------------------------
    def _basis_object(self, basis: Any, mean: Any) -> SubspaceBasis:
        if isinstance(basis, str | PathLike):
            basis = SubspaceBasis.load(Path(basis))
        if isinstance(basis, SubspaceBasis):
            if mean is not None and not np.array_equal(np.asarray(mean, float), basis.mean):
                raise ValueError("give the mean with a bare basis array only: this basis has one.")
            self._source = basis
            return basis
        obj = SubspaceBasis(_orthonormal_rows(basis, "basis"), mean)
        self._source = obj
        return obj

    def _check_provenance(
        self, obj: SubspaceBasis, eps: float | None, dlt: float | None, nm: float | None
    ) -> None:
        g = obj.guarantee
        if g is not None:
            given = {"basis_epsilon": eps, "basis_delta": dlt, "basis_noise_multiplier": nm}
            held = {
                "basis_epsilon": g.epsilon,
                "basis_delta": g.delta,
                "basis_noise_multiplier": g.noise_multiplier,
            }
            for name, v in given.items():
                if v is not None and not math.isclose(float(v), float(held[name] or 0.0)):
                    raise ValueError(f"the basis records {name}={held[name]!r}, got {name}={v!r}.")
            self.basis_epsilon: float | None = float(g.epsilon)
            self.basis_delta: float | None = float(g.delta)
            self.basis_noise_multiplier: float | None = (
                None if g.noise_multiplier is None else float(g.noise_multiplier)
            )
            return
        if (eps is None) != (dlt is None):
            raise ValueError(
                "a DP-PCA basis needs both basis_epsilon and basis_delta, got basis_epsilon="
                f"{eps!r}, basis_delta={dlt!r}."
            )
        if eps is None and nm is not None:
            raise ValueError("basis_noise_multiplier applies to a DP-PCA basis (basis_epsilon).")
        self.basis_epsilon = None if eps is None else check_real("basis_epsilon", eps, gt=0)
        self.basis_delta = None if dlt is None else check_real("basis_delta", dlt, gt=0, lt=1)
        self.basis_noise_multiplier = (
            None if nm is None else check_real("basis_noise_multiplier", nm, gt=0)
        )

    # ---- facts -----------------------------------------------------------------------------------
    @property
    def basis_guarantee(self) -> ApproxDP | None:
        """The central DP of the basis release (``None``: public basis)."""
        if self.basis_epsilon is None:
            return None
        return ApproxDP(
            self.basis_epsilon,
            float(self.basis_delta),  # type: ignore[arg-type]
            neighbouring="corpora that differ in one record (central DP of the basis release)",
            note="DP-PCA basis, charged once to every record of its corpus",
            relation=Neighbouring.RECORD,
            noise_multiplier=self.basis_noise_multiplier,
        )

    def _basis_note(self) -> str:
        g = self.basis_guarantee
        if g is None:
            return "basis from public data (no privacy cost)"
        return (
            f"basis by DP-PCA, central ({g.epsilon:.4g}, {g.delta:.3g})-DP, charged once to "
            "every record of its corpus"
        )

    @property
    def guarantee(self) -> Guarantee:
        """Per-release guarantee (what each release charges); see :meth:`composed_guarantee`."""
        return self._law.guarantee(self._basis_note())

    def composed_guarantee(self, *, releases: int = 1, delta: float = 1e-5) -> Guarantee:
        r"""What a record of the basis' corpus has after ``releases`` fresh releases and the basis.

        Basic composition of the pure/metric part with the basis' (epsilon_p, delta_p); the PLD
        accountant when both are Gaussian. Reported as (epsilon, delta)-DP for replacing the
        record (``delta`` is the total delta at which Gaussian parts are reported). With a
        public basis it is the releases' own composition.

        Examples
        --------
        >>> P = np.eye(4)[:2]
        >>> m = SubspaceMechanism(basis=P, epsilon=10.0, basis_epsilon=1.0, basis_delta=1e-5)
        >>> g = m.composed_guarantee()
        >>> g.epsilon, g.delta
        (21.0, 1e-05)
        """
        from ..core.accounting import cost_of

        releases = check_int("releases", releases, ge=1)
        delta = check_real("delta", delta, gt=0, lt=1)
        costs: list[Cost] = [cost_of(self.guarantee)]
        counts = [releases]
        bg = self.basis_guarantee
        if bg is not None:
            costs.append(cost_of(bg))
            counts.append(1)
        eps, dlt = compose(costs, delta, counts=counts)
        what = f"{releases} release(s) of a record"
        if bg is not None:
            what += f" plus the DP-PCA basis (central ({bg.epsilon:g}, {bg.delta:g}))"
        return ApproxDP(
            eps,
            dlt,
            neighbouring="replacing one record (its releases and, for a DP-PCA basis, the "
            "basis computed from a corpus that contains it)",
            note=f"composition of {what}: basic for pure/metric parts, PLD for Gaussian parts",
            relation=Neighbouring.RECORD,
        )

    @property
    def config(self) -> dict[str, Any]:
        """As for every mechanism, but the mean appears by its SHA-256 too: it is the key
        holder's, and configurations travel into file and store metadata."""
        cfg = super().config
        cfg["mean"] = canonical_params({"mean": self.mean}, inline=False)["mean"]
        return cfg

    def output_dim(self, d: int) -> int:
        return self.k

    def check_dim(self, d: int) -> None:
        d = check_int("d", d, ge=1)
        if d != self.basis.shape[1]:
            raise DataError(
                f"X has dimension {d} but the subspace basis is for dimension "
                f"{self.basis.shape[1]} (dimension mismatch)."
            )

    def release_metadata(self, d: int) -> dict[str, Any]:
        return {
            "subspace": {
                "k": self.k,
                "input_dim": int(self.basis.shape[1]),
                "noise": self.noise,
                "basis": self._basis_note(),
                "composed_guarantee": self.composed_guarantee().describe(),
            }
        }

    @property
    def public_transform_key(self) -> Any:
        return canonical_params({"basis": self.basis, "mean": self.mean}, inline=False)

    def public_transform(self, X: Any) -> NDArray[np.floating[Any]]:
        """:math:`P(q - \\mu)` of inputs prepared like releases (``input_norm``), no noise.

        What the key holder compares releases with (its queries); not public: it holds the
        basis.
        """
        arr, single = check_embeddings(X, allow_zero=self.input_norm == "none")
        self.check_dim(arr.shape[-1])
        out = (self.prepare_inputs(np.atleast_2d(arr)) - self.mean) @ self.basis.T
        return out[0] if single else out

    def cosine_draws(self, norms: Any, *, rng: Any = None) -> NDArray[np.float64]:
        """One draw of :math:`\\cos(v, v + z)` per signal norm :math:`|v|` (k' theory)."""
        r = np.asarray(norms, dtype=np.float64).ravel()
        return self._law.cosines(r, as_generator(rng))

    # ---- the release -----------------------------------------------------------------------------
    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        V = (X - self.mean) @ self.basis.T
        return self._law.perturb(V, source)


def basis_from(
    spec: Any,
    *,
    corpus: str | Path | None = None,
    column: str | None = None,
    id_column: str | None = None,
    model: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    ledger: Any = None,
    subject: str | None = None,
    max_components: int | None = None,
    batch_rows: int = 16384,
    rng: Any = None,
    charge_with_next_release: bool = False,
) -> SubspaceBasis:
    """The basis a command names: a saved basis, public data, or DP-PCA of the corpus.

    Parameters
    ----------
    spec : SubspaceBasis, path or "dp-pca"
        * a :class:`SubspaceBasis` or a file written by :meth:`SubspaceBasis.save`: itself;
        * another file: **public** data -- embeddings (``.parquet``/``.npz``/``.npy``/
          ``.jsonl``) or texts (embedded with ``model``) -- whose exact PCA is the basis (no
          privacy cost: use only data that may be published);
        * ``"dp-pca"``: :func:`dp_pca` of the private ``corpus`` (an embeddings file, read
          once here, once more by the release) at (``epsilon``, ``delta``), charged to every
          record of the corpus in ``ledger`` (:func:`charge_basis`) before it is returned.
    corpus : path
        The private embeddings (``"dp-pca"`` only).
    charge_with_next_release : bool
        Stage the DP-PCA charge and commit it with the first release the ledger commits
        (:func:`charge_basis` ``with_next_release``): a command that fails or is refused
        before that records nothing. The command must then release with this ledger object.

    Raises
    ------
    ValueError, DataError, FileNotFoundError
        A missing or unreadable file, DP-PCA without its parameters or corpus, a corpus of
        texts (embed it first: DP-PCA and the release both read the embeddings), a corpus
        without record ids when a ledger must charge them.
    """
    if isinstance(spec, SubspaceBasis):
        return spec
    if spec == "dp-pca":
        path = Path(corpus) if corpus is not None else None
        basis, ids = _dp_pca_of(
            path, column=column, id_column=id_column, epsilon=epsilon, delta=delta,
            max_components=max_components, rng=rng, batch_rows=batch_rows,
            with_ids=ledger is not None,
        )  # fmt: skip
        assert path is not None
        if ledger is not None:
            charge_basis(
                ledger, basis, ids, subject=subject, destination=f"basis of {path.name}",
                with_next_release=charge_with_next_release,
            )  # fmt: skip
        return basis
    if epsilon is not None or delta is not None:
        raise ValueError(
            "--basis-epsilon/--basis-delta apply to a DP-PCA basis (--basis dp-pca) only."
        )
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"basis not found: {path}")
    if SubspaceBasis.is_basis_file(path):
        return SubspaceBasis.load(path)
    return _public_basis(path, column=column, model=model, max_components=max_components)


def fit_basis(
    spec: Any,
    output: str | Path,
    *,
    corpus: str | Path | None = None,
    column: str | None = None,
    id_column: str | None = None,
    model: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    ledger: Any = None,
    subject: str | None = None,
    max_components: int | None = None,
    rng: Any = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fit a basis once and write it (``privembed basis``): index, protect, advise and search
    reuse the file (``--basis FILE``) and nothing refits or charges it again.

    ``spec`` is ``"dp-pca"`` (DP-PCA of the private ``corpus`` at (``epsilon``, ``delta``),
    charged once to every record of the corpus in ``ledger``, in the commit that publishes the
    file: no file without its charge, and a refused charge writes no file) or public data (as
    :func:`basis_from`: exact PCA, no privacy cost). The file keeps the DP-PCA guarantee, so
    every release with it prints the composition.

    Returns
    -------
    dict
        ``output``, ``components``, ``dim``, ``records`` (DP-PCA), ``guarantee`` (text or
        None) and ``charge`` (the ledger charge: ``records``, ``fresh``, ``free``, ``batch``;
        None without a ledger or for a public basis).

    Raises
    ------
    FileExistsError
        ``output`` exists and ``overwrite`` is False (checked first).
    privembed.keys.ledger.BudgetExceeded
        The charge would pass a budget: nothing is recorded, no file is written.
    """
    from ..data.io import atomic_output

    out = Path(output)
    if out.exists() and not overwrite:
        raise FileExistsError(f"output exists: {out} (pass --overwrite to replace it).")
    if spec == "dp-pca":
        basis, ids = _dp_pca_of(
            None if corpus is None else Path(corpus), column=column, id_column=id_column,
            epsilon=epsilon, delta=delta, max_components=max_components, rng=rng,
            batch_rows=16384, with_ids=ledger is not None,
        )  # fmt: skip
    else:
        basis = basis_from(spec, model=model, epsilon=epsilon, delta=delta, column=column)
        ids = []
    charge: dict[str, Any] = {}

    def commit() -> None:
        charge.update(
            charge_basis(ledger, basis, ids, subject=subject, destination=str(out.resolve()))
        )

    charged = ledger is not None and basis.guarantee is not None
    with atomic_output(out, commit=commit if charged else None, overwrite=overwrite) as tmp:
        Path(tmp).write_bytes(basis.to_bytes())
    return {
        "output": str(out),
        "components": basis.size,
        "dim": basis.dim,
        "records": basis.n_records,
        "guarantee": None if basis.guarantee is None else basis.guarantee.describe(),
        "charge": charge or None,
    }


def _dp_pca_of(
    path: Path | None,
    *,
    column: str | None,
    id_column: str | None,
    epsilon: float | None,
    delta: float | None,
    max_components: int | None,
    rng: Any,
    batch_rows: int,
    with_ids: bool,
) -> tuple[SubspaceBasis, list[Any]]:
    """DP-PCA of the private embeddings at ``path`` (one pass) and, ``with_ids``, their ids."""
    if epsilon is None or delta is None:
        raise ValueError(
            "a DP-PCA basis needs its privacy parameters: --basis-epsilon and --basis-delta."
        )
    if path is None:
        raise ValueError("a DP-PCA basis is computed from the corpus: give its embeddings.")
    acc, ids = _corpus_moments(
        path, column=column, id_column=id_column, batch_rows=batch_rows, with_ids=with_ids
    )
    basis = dp_pca(
        acc, epsilon=epsilon, delta=delta, max_components=max_components, rng=rng,
        metadata={"corpus": path.name},
    )  # fmt: skip
    return basis, ids


def _corpus_moments(
    path: Path, *, column: str | None, id_column: str | None, batch_rows: int, with_ids: bool
) -> tuple[SecondMoments, list[Any]]:
    """One pass over a private embeddings file: its second moments and (``with_ids``) its ids."""
    from ..data import io

    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    if io.holds_texts(path):
        raise DataError(
            f"{path.name} holds texts: DP-PCA and the release both read the corpus' "
            "embeddings, so embed it first (privembed embed) and index the embeddings."
        )
    _n, _d, _, batches = io.iter_batches(
        path, batch_rows=batch_rows, column=column, id_column=id_column
    )
    acc: SecondMoments | None = None
    ids: list[Any] = []
    for b in batches:
        if acc is None:
            acc = SecondMoments(b.X.shape[1])
        acc.add(b.X)
        if with_ids:
            if b.ids is None:
                raise DataError(
                    f"{path.name} has no record ids; the ledger charges the DP-PCA basis to "
                    "every record by id (--id-field)."
                )
            ids.extend(b.ids)
    if acc is None:
        raise DataError(f"{path.name} holds no rows.")
    return acc, ids


def _public_basis(
    path: Path, *, column: str | None, model: str | None, max_components: int | None
) -> SubspaceBasis:
    """The exact PCA basis of public data: an embeddings file, or texts embedded with ``model``."""
    from ..data import io

    if io.holds_texts(path):
        from ..data.embedders import Embedder

        texts = io.read_text_table(path).texts
        emb = Embedder(model)
        X = emb.encode(texts)
        meta = {"public_data": path.name, "embedding_model": emb.metadata().get("embedding_model")}
    else:
        table = io.read_embeddings(path, column=column)
        X = table.X
        meta = {"public_data": path.name, "embedding_model": table.metadata.get("embedding_model")}
    return SubspaceBasis.from_embeddings(X, max_components=max_components, metadata=meta)
