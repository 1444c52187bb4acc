r"""Public Johnson-Lindenstrauss projections: one small class per kind, a shared matrix cache.

:class:`JLProjection` is a *public* random projection :math:`P \in \mathbb R^{k\times d}` derived
from a public seed, so every party that compares vectors uses the same ``P`` ([MC25] Table 1).
It is not a privacy mechanism by itself; :class:`~privembed.mechanisms.projection.PrivateProjection`
adds calibrated noise after it. ``JLProjection(k=, kind=, seed=)`` returns the class for the
kind -- :class:`GaussianJL`, :class:`SparseJL` or :class:`SRHTJL` -- and each kind implements
only what differs: how ``P`` is drawn, how it is applied, and what its file stores. Everything
else (derivation, caching, norms, fingerprint, the file format) is shared.

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. Table 1.
.. [Ach03] Achlioptas (2003). Database-friendly random projections: Johnson-Lindenstrauss with
   binary coins. JCSS 66(4).
.. [AC09] Ailon & Chazelle (2009). The fast Johnson-Lindenstrauss transform and approximate
   nearest neighbors. SIAM J. Computing 39(1); Tropp (2011), Improved analysis of the subsampled
   randomized Hadamard transform.
.. [DG03] Dasgupta & Gupta (2003). An elementary proof of a theorem of Johnson and
   Lindenstrauss. Random Structures & Algorithms 22(1).
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_embeddings, check_int, check_real

__all__ = [
    "KINDS",
    "MAX_MATRIX_BYTES",
    "SRHTJL",
    "GaussianJL",
    "JLProjection",
    "SparseJL",
    "fwht",
    "jl_target_dim",
    "srht_matrix",
]

#: projection kinds, in the order of :class:`JLProjection`'s error messages
KINDS: tuple[str, ...] = ("gaussian", "sparse", "srht")
_FORMAT = "privembed.jl_projection/1"
#: rows per SRHT block: a (2^m, block) float temporary stays cache-sized
_SRHT_BLOCK = 1024
#: largest public matrix built in memory (float64 bytes); larger requests are refused with a
#: one-line error instead of exhausting memory
MAX_MATRIX_BYTES = 2 << 30


# ------------------------------------------------------------------------------------------
# JL target dimension and the fast Walsh-Hadamard transform
# ------------------------------------------------------------------------------------------


def jl_target_dim(n: int, eta: float, *, failure_prob: float = 0.05) -> int:
    r"""Smallest k for which a Gaussian (or Achlioptas) projection keeps every pairwise squared
    distance of ``n`` points within a factor :math:`1 \pm \eta`, with probability at least
    ``1 - failure_prob``.

    Parameters
    ----------
    n : int, >= 2
        Number of points.
    eta : float, in (0, 1)
        Allowed relative distortion of squared distances.
    failure_prob : float, in (0, 1), default 0.05
        Probability that some pair is distorted by more than ``eta``.

    Returns
    -------
    k : int

    Notes
    -----
    For a fixed vector and :math:`P` with i.i.d. :math:`\mathcal N(0, 1/k)` entries, each tail
    of :math:`\|Px\|^2/\|x\|^2` beyond :math:`1 \pm \eta` has probability at most
    :math:`\exp(-k(\eta^2/2 - \eta^3/3)/2)` ([DG03] Lemma 2.2; [Ach03] Thm 1.1 shows the same
    bound for the sparse sign matrix). A union bound over the :math:`m = n(n-1)/2` pairs gives

    .. math::
        k \ge \frac{2\ln(2m/\beta)}{\eta^2/2 - \eta^3/3}, \qquad \beta = \text{failure\_prob},

    i.e. :math:`k = O(\log n/\eta^2)`. The SRHT satisfies a JL property with an extra
    logarithmic factor ([AC09]); this bound is not proven for it.

    Examples
    --------
    >>> jl_target_dim(1000, 0.2)
    1940
    >>> jl_target_dim(1000, 0.5, failure_prob=0.01)
    443
    """
    n = check_int("n", n, ge=2)
    eta = check_real("eta", eta, gt=0, lt=1)
    beta = check_real("failure_prob", failure_prob, gt=0, lt=1)
    pairs = n * (n - 1) / 2.0
    return math.ceil(2.0 * math.log(2.0 * pairs / beta) / (eta**2 / 2.0 - eta**3 / 3.0))


def _next_pow2(m: int) -> int:
    return 1 << max(0, (m - 1).bit_length())


def fwht(X: Any, *, axis: int = -1) -> NDArray[np.floating[Any]]:
    r"""Unnormalised fast Walsh-Hadamard transform along ``axis`` (length a power of two).

    Returns :math:`H x` for every vector along ``axis``, with :math:`H` the Sylvester-ordered
    Hadamard matrix (``scipy.linalg.hadamard``). ``O(m log m)`` per vector, vectorised: the
    transform axis is moved first so that every butterfly stage runs over long contiguous runs.
    The input is not modified; float32 input stays float32, anything else becomes float64.

    Examples
    --------
    >>> fwht(np.array([1.0, 0.0, 1.0, 0.0])).tolist()
    [2.0, 2.0, 0.0, 0.0]
    """
    arr = np.asarray(X)
    dtype = np.float32 if arr.dtype == np.float32 else np.float64
    moved = np.moveaxis(arr.astype(dtype, copy=False), axis, 0)
    m = moved.shape[0]
    if m & (m - 1):
        raise ValueError(f"fwht needs a power-of-two length, got length={m}.")
    Y: NDArray[np.floating[Any]] = np.array(moved, dtype=dtype, order="C", copy=True)
    _fwht_leading(Y.reshape(m, -1))
    return np.moveaxis(Y, 0, axis)


def _fwht_leading(Y: NDArray[np.floating[Any]]) -> None:
    """In-place unnormalised FWHT along axis 0 of a C-contiguous (m, r) array."""
    m, r = Y.shape
    h = 1
    while h < m:
        V = Y.reshape(m // (2 * h), 2, h * r)
        a = V[:, 0, :]
        b = V[:, 1, :]
        a += b  # a + b
        b *= -2.0
        b += a  # (a + b) - 2b = a - b
        h *= 2


def srht_matrix(
    signs: NDArray[np.float64], rows: NDArray[np.int64], d: int, k: int
) -> NDArray[np.float64]:
    r"""The dense SRHT matrix :math:`k^{-1/2} R H D`, restricted to the first ``d`` columns.

    ``signs`` are the diagonal of :math:`D` on the padded dimension, ``rows`` the sampled rows
    of the unnormalised Sylvester Hadamard matrix, :math:`H_{ij} = (-1)^{\mathrm{popcount}(i
    \,\&\, j)}`; only the entries used are computed. Building and loading an SRHT both call
    this, so a saved projection rebuilds the identical matrix.

    Examples
    --------
    >>> srht_matrix(np.array([1.0, -1.0]), np.array([0, 1]), 2, 1).tolist()
    [[1.0, -1.0], [1.0, 1.0]]
    """
    cols = np.arange(d, dtype=np.int64)
    parity = np.bitwise_count(rows[:, None] & cols[None, :]) & 1
    dense: NDArray[np.float64] = (1.0 - 2.0 * parity) * signs[None, :d] / math.sqrt(k)
    return dense


# ------------------------------------------------------------------------------------------
# Public projections
# ------------------------------------------------------------------------------------------


@dataclass
class _Built:
    """Everything derived for one input dimension ``d`` (cached by :class:`JLProjection`).

    ``dense`` is always there; the kinds fill the fields they use (sparse: ``sparse``; SRHT:
    ``signs`` and ``rows``); norms and float32 copies are filled on first use.
    """

    dense: NDArray[np.float64]
    sparse: sp.csr_matrix | None = None
    signs: NDArray[np.float64] | None = None  # SRHT: +-1 on the padded dimension
    rows: NDArray[np.int64] | None = None  # SRHT: sampled rows of H, sorted
    spectral: float | None = None
    max_col: float | None = None
    f32: NDArray[np.float32] | None = None
    sparse_f32: sp.csr_matrix | None = None


#: generated matrices shared by every JLProjection (they are pure functions of kind, d, k, seed)
_SHARED: OrderedDict[tuple[str, int, int, int], _Built] = OrderedDict()
_SHARED_MAX = 16
#: the class of each kind (filled as the kind classes are defined)
_BY_KIND: dict[str, type[JLProjection]] = {}


class JLProjection:
    r"""A public Johnson-Lindenstrauss projection :math:`P \in \mathbb R^{k\times d}` ([MC25] Table 1).

    ``P`` is a deterministic function of ``(kind, d, k, seed)``: it is drawn from a PCG64
    generator seeded with ``SeedSequence([seed, kind_code, d, k])`` -- a fixed bit generator,
    independent of the noise-randomness policy in :mod:`privembed.core.rng` -- so every party that
    must compare vectors rebuilds the same matrix. It is **public**: never use it as a secret,
    and never draw it from the noise ``rng``. Because the draw depends on ``d``, matrices are
    built lazily for each input dimension seen and cached. :meth:`save` / :meth:`load` give a
    portable file (NumPy does not promise identical generator streams across versions).

    ``JLProjection(k=, kind=, seed=)`` returns an instance of the kind's class
    (:class:`GaussianJL`, :class:`SparseJL`, :class:`SRHTJL`); projections compare equal, hash
    and print by ``(k, kind, seed)`` whichever class built them.

    Every kind has :math:`E[P^\top P] = I_d`, so :math:`E\|Px\|^2 = \|x\|^2`.

    Parameters
    ----------
    k : int, >= 1
        Output dimension.
    kind : {"gaussian", "sparse", "srht"}
        ``"gaussian"``: i.i.d. :math:`\mathcal N(0, 1/k)` entries. ``"sparse"``: Achlioptas
        ([Ach03]) entries :math:`\sqrt{3/k}\cdot\{+1, 0, -1\}` with probabilities 1/6, 2/3, 1/6
        (density 1/3), stored and applied as ``scipy.sparse``. ``"srht"``: subsampled randomised
        Hadamard transform ([AC09]) :math:`P = k^{-1/2} R H D`, with the input zero-padded to
        :math:`m = 2^{\lceil\log_2\max(d,k)\rceil}`, :math:`D` random signs, :math:`H` the
        unnormalised Hadamard matrix and :math:`R` ``k`` distinct sampled rows; applied with a
        fast Walsh-Hadamard transform. Its entries are :math:`\pm k^{-1/2}`, so every column
        has norm exactly 1 and :math:`\|P\|_2 \le \sqrt{m/k}`.
    seed : int, >= 0, default 0
        The *public* seed.

    Examples
    --------
    >>> P = JLProjection(k=4, kind="srht", seed=7)
    >>> P
    JLProjection(k=4, kind='srht', seed=7)
    >>> type(P).__name__
    'SRHTJL'
    >>> P.matrix(6).shape
    (4, 6)
    >>> X = np.eye(6)
    >>> bool(np.allclose(P.apply(X), X @ P.matrix(6).T))
    True
    >>> round(P.max_column_norm(6), 12)
    1.0
    """

    #: the kind this class draws (set by each kind's class)
    kind: ClassVar[str]
    #: stable code of the kind in the public seed derivation (never change one)
    kind_code: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _BY_KIND[cls.kind] = cls

    def __new__(cls, *args: Any, **kwargs: Any) -> JLProjection:
        target: type[JLProjection] = cls
        if cls is JLProjection:
            kind = kwargs.get("kind", "gaussian")
            # an unknown kind falls through to __init__, which refuses it with the usual message
            target = _BY_KIND.get(kind, cls) if isinstance(kind, str) else cls
        return object.__new__(target)

    def __init__(self, *, k: int, kind: str = "gaussian", seed: int = 0) -> None:
        self.k = check_int("k", k, ge=1)
        kind = check_choice("kind", kind, KINDS)
        if kind != self.kind:
            raise ValueError(
                f"kind must be {self.kind!r} for {type(self).__name__}, got kind={kind!r}."
            )
        self.seed = check_int("seed", seed, ge=0)
        self._cache: dict[int, _Built] = {}

    def __repr__(self) -> str:
        return f"JLProjection(k={self.k}, kind={self.kind!r}, seed={self.seed})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JLProjection):
            return NotImplemented
        return (self.k, self.kind, self.seed) == (other.k, other.kind, other.seed)

    def __hash__(self) -> int:
        return hash((self.k, self.kind, self.seed))

    # ---- what each kind provides ------------------------------------------------------------
    def _draw(self, g: np.random.Generator, d: int) -> _Built:
        """Draw ``P`` for dimension ``d`` from the public generator ``g``."""
        raise NotImplementedError

    def _project(self, X: NDArray[np.floating[Any]], b: _Built) -> NDArray[np.floating[Any]]:
        """``X @ P.T`` for a validated 2-D ``X`` (float32 stays float32)."""
        raise NotImplementedError

    def _payload(self, b: _Built) -> dict[str, Any]:
        """The arrays that :meth:`save` writes for this kind."""
        raise NotImplementedError

    def _from_payload(self, z: Mapping[str, Any], d: int) -> _Built:
        """Rebuild from the arrays :meth:`_payload` wrote."""
        raise NotImplementedError

    # ---- construction -----------------------------------------------------------------------
    def padded_dim(self, d: int) -> int:
        """SRHT working dimension ``2**ceil(log2(max(d, k)))`` (``d`` for the other kinds)."""
        return check_int("d", d, ge=1)

    def _generator(self, d: int) -> np.random.Generator:
        ss = np.random.SeedSequence([self.seed, self.kind_code, d, self.k])
        return np.random.Generator(np.random.PCG64(ss))

    def check_size(self, d: int) -> None:
        """Refuse a matrix that would not fit in memory (:data:`MAX_MATRIX_BYTES`)."""
        need = 8 * self.k * d
        if need > MAX_MATRIX_BYTES:
            raise DataError(
                f"a {self.kind} projection with k={self.k} from d={d} needs "
                f"{need / 2**30:.1f} GiB for its matrix (limit {MAX_MATRIX_BYTES / 2**30:.0f} "
                "GiB): choose a smaller k."
            )

    def _build(self, d: int) -> _Built:
        d = check_int("d", d, ge=1)
        self.check_size(d)
        built = self._cache.get(d)
        if built is not None:
            return built
        key = (self.kind, d, self.k, self.seed)
        built = _SHARED.get(key)
        if built is not None:
            _SHARED.move_to_end(key)
            self._cache[d] = built
            return built
        built = self._draw(self._generator(d), d)
        built.dense.setflags(write=False)
        self._cache[d] = built
        _SHARED[key] = built
        while len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
        return built

    def matrix(self, d: int) -> NDArray[np.float64]:
        """The public matrix for input dimension ``d``: dense float64, shape (k, d), read-only."""
        return self._build(d).dense

    def sparse_matrix(self, d: int) -> sp.csr_matrix:
        """The matrix as ``scipy.sparse`` CSR (``kind="sparse"`` stores it that way natively)."""
        b = self._build(d)
        return b.sparse if b.sparse is not None else sp.csr_matrix(b.dense)

    # ---- application ------------------------------------------------------------------------
    def apply(self, X: Any, *, check_input: bool = True) -> NDArray[np.floating[Any]]:
        """Project rows: ``X @ P.T`` for ``X`` of shape (n, d) or (d,).

        float32 input is projected in float32 (throughput), anything else in float64. The
        input is not modified. Gaussian uses BLAS, sparse uses ``scipy.sparse``, SRHT a blocked
        fast Walsh-Hadamard transform (``O(n m log m)`` instead of ``O(n k d)``).

        Parameters
        ----------
        X : array_like, shape (n, d) or (d,)
        check_input : bool, default True
            ``False`` skips validation, for callers that have already checked ``X``: it must
            then be a 2-D float ndarray of finite values.

        Raises
        ------
        privembed.DataError
            Wrong number of dimensions, empty input, NaN or inf.
        """
        if not check_input:
            return self._project(X, self._build(X.shape[1]))
        arr, single = check_embeddings(X, allow_zero=True)
        out = self._project(arr, self._build(arr.shape[1]))
        return out[0] if single else out

    __call__ = apply

    # ---- properties of P --------------------------------------------------------------------
    def spectral_norm(self, d: int) -> float:
        r"""Exact :math:`\|P\|_2` (largest singular value) for input dimension ``d``.

        For a Gaussian ``P`` it is close to :math:`1 + \sqrt{d/k}` when ``k < d``.
        """
        b = self._build(d)
        if b.spectral is None:
            # largest eigenvalue of the smaller Gram matrix: much cheaper than a full SVD
            P = b.dense
            gram = P @ P.T if P.shape[0] <= P.shape[1] else P.T @ P
            b.spectral = float(np.sqrt(max(np.linalg.eigvalsh(gram)[-1], 0.0)))
        return b.spectral

    def max_column_norm(self, d: int) -> float:
        r""":math:`\max_j \|P e_j\|_2`: the sensitivity of ``P x`` when one coordinate moves by <= 1."""
        b = self._build(d)
        if b.max_col is None:
            b.max_col = float(np.sqrt(np.max(np.sum(b.dense**2, axis=0))))
        return b.max_col

    def fingerprint(self, d: int) -> str:
        """SHA-256 of the matrix (float64, little-endian, C order): same hash <=> same ``P``."""
        dense = np.ascontiguousarray(self.matrix(d), dtype="<f8")
        return hashlib.sha256(dense.tobytes()).hexdigest()

    def metadata(self, d: int) -> dict[str, Any]:
        """JSON-safe description of ``P`` for input dimension ``d`` (for file metadata)."""
        return {
            "kind": self.kind,
            "k": self.k,
            "d": int(d),
            "seed": self.seed,
            "padded_dim": self.padded_dim(d),
            "sha256": self.fingerprint(d),
            "spectral_norm": self.spectral_norm(d),
            "max_column_norm": self.max_column_norm(d),
            "derivation": "PCG64(SeedSequence([seed, kind_code, d, k])), kind_code="
            f"{self.kind_code}",
        }

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path: str | Path, d: int) -> Path:
        """Write ``P`` for dimension ``d`` with its (kind, d, k, seed) to an ``.npz`` file.

        Gaussian stores the dense matrix, sparse its CSR arrays, SRHT only its signs and rows.
        Returns the path written.
        """
        b = self._build(d)
        path = Path(path)
        payload: dict[str, Any] = {
            "format": np.array(_FORMAT),
            "kind": np.array(self.kind),
            "d": np.array(int(d)),
            "k": np.array(self.k),
            "seed": np.array(self.seed),
            "sha256": np.array(self.fingerprint(d)),
            **self._payload(b),
        }
        with path.open("wb") as fh:
            np.savez(fh, **payload)
        return path

    @staticmethod
    def load(path: str | Path, *, verify: bool = True) -> tuple[JLProjection, int]:
        """Read a file written by :meth:`save`; returns ``(projection, d)``.

        The stored matrix is used as is (it is the portable artefact). Its SHA-256 is always
        checked against the stored hash; with ``verify=True`` it must also equal the matrix
        this NumPy regenerates from (kind, d, k, seed).

        Raises
        ------
        privembed.DataError
            Not a projection file, corrupted, or (``verify=True``) not reproducible here.
        """
        with np.load(Path(path), allow_pickle=False) as z:
            if "format" not in z or str(z["format"]) != _FORMAT:
                raise DataError(f"{path} is not a privembed JL projection file.")
            kind, d, k, seed = str(z["kind"]), int(z["d"]), int(z["k"]), int(z["seed"])
            proj = JLProjection(k=k, kind=kind, seed=seed)
            built = proj._from_payload(z, d)
            stored = str(z["sha256"])
        if built.dense.shape != (k, d):
            raise DataError(f"{path}: matrix has shape {built.dense.shape}, expected {(k, d)}.")
        built.dense.setflags(write=False)
        proj._cache[d] = built
        if proj.fingerprint(d) != stored:
            raise DataError(f"{path}: the matrix does not match its stored SHA-256 (corrupted).")
        if verify and JLProjection(k=k, kind=kind, seed=seed).fingerprint(d) != stored:
            raise DataError(
                f"{path}: this NumPy regenerates a different matrix from (kind={kind!r}, d={d}, "
                f"k={k}, seed={seed}); load with verify=False to trust the file."
            )
        return proj, d


class GaussianJL(JLProjection):
    r"""Dense Gaussian JL matrix: i.i.d. :math:`\mathcal N(0, 1/k)` entries, applied by BLAS.

    Build it as ``JLProjection(k=..., kind="gaussian", seed=...)`` (the default kind); its
    file stores the dense matrix.
    """

    kind = "gaussian"
    kind_code = 1

    def __init__(self, *, k: int, kind: str = "gaussian", seed: int = 0) -> None:
        super().__init__(k=k, kind=kind, seed=seed)

    def _draw(self, g: np.random.Generator, d: int) -> _Built:
        return _Built(dense=g.standard_normal((self.k, d)) / math.sqrt(self.k))

    def _project(self, X: NDArray[np.floating[Any]], b: _Built) -> NDArray[np.floating[Any]]:
        if X.dtype == np.float32:
            if b.f32 is None:
                b.f32 = b.dense.astype(np.float32)
            return X @ b.f32.T
        return X @ b.dense.T

    def _payload(self, b: _Built) -> dict[str, Any]:
        return {"matrix": b.dense}

    def _from_payload(self, z: Mapping[str, Any], d: int) -> _Built:
        return _Built(dense=np.array(z["matrix"], dtype=np.float64))


class SparseJL(JLProjection):
    r"""Achlioptas sparse sign matrix: :math:`\sqrt{3/k}\cdot\{+1, 0, -1\}` with probabilities
    1/6, 2/3, 1/6 ([Ach03]), stored and applied as ``scipy.sparse`` CSR.

    Build it as ``JLProjection(k=..., kind="sparse", seed=...)``; its file stores the CSR arrays.
    """

    kind = "sparse"
    kind_code = 2

    def __init__(self, *, k: int, kind: str = "sparse", seed: int = 0) -> None:
        super().__init__(k=k, kind=kind, seed=seed)

    def _draw(self, g: np.random.Generator, d: int) -> _Built:
        u = g.random((self.k, d))
        signs = np.where(u < 1.0 / 6.0, 1.0, np.where(u >= 5.0 / 6.0, -1.0, 0.0))
        dense = signs * math.sqrt(3.0 / self.k)
        return _Built(dense=dense, sparse=sp.csr_matrix(dense))

    def _project(self, X: NDArray[np.floating[Any]], b: _Built) -> NDArray[np.floating[Any]]:
        assert b.sparse is not None
        S = b.sparse
        if X.dtype == np.float32:
            if b.sparse_f32 is None:
                b.sparse_f32 = b.sparse.astype(np.float32)
            S = b.sparse_f32
        return np.asarray(S @ np.ascontiguousarray(X.T)).T

    def _payload(self, b: _Built) -> dict[str, Any]:
        assert b.sparse is not None
        return {"data": b.sparse.data, "indices": b.sparse.indices, "indptr": b.sparse.indptr}

    def _from_payload(self, z: Mapping[str, Any], d: int) -> _Built:
        S = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=(self.k, d))
        return _Built(dense=S.toarray(), sparse=S)


class SRHTJL(JLProjection):
    r"""Subsampled randomised Hadamard transform :math:`P = k^{-1/2} R H D` ([AC09]).

    The input is zero-padded to :math:`m = 2^{\lceil\log_2\max(d,k)\rceil}` (:meth:`padded_dim`),
    multiplied by random signs :math:`D`, transformed by a blocked fast Walsh-Hadamard transform
    (:func:`fwht`) and ``k`` distinct rows :math:`R` are kept. Build it as
    ``JLProjection(k=..., kind="srht", seed=...)``; its file stores only the signs and rows,
    from which :func:`srht_matrix` rebuilds the dense matrix.
    """

    kind = "srht"
    kind_code = 3

    def __init__(self, *, k: int, kind: str = "srht", seed: int = 0) -> None:
        super().__init__(k=k, kind=kind, seed=seed)

    def padded_dim(self, d: int) -> int:
        return _next_pow2(max(check_int("d", d, ge=1), self.k))

    def _draw(self, g: np.random.Generator, d: int) -> _Built:
        m = self.padded_dim(d)
        flips = np.asarray(g.integers(0, 2, size=m) * 2.0 - 1.0, dtype=np.float64)
        rows = np.sort(g.choice(m, size=self.k, replace=False)).astype(np.int64)
        return _Built(dense=srht_matrix(flips, rows, d, self.k), signs=flips, rows=rows)

    def _project(self, X: NDArray[np.floating[Any]], b: _Built) -> NDArray[np.floating[Any]]:
        assert b.signs is not None and b.rows is not None
        n, d = X.shape
        m = b.signs.shape[0]
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        signs = b.signs[:d, None].astype(dtype)
        scale = dtype(1.0 / math.sqrt(self.k))
        out = np.empty((n, self.k), dtype=dtype)
        for start in range(0, n, _SRHT_BLOCK):
            stop = min(start + _SRHT_BLOCK, n)
            Yt = np.zeros((m, stop - start), dtype=dtype)  # transform axis first: contiguous
            Yt[:d] = X[start:stop].T
            Yt[:d] *= signs
            _fwht_leading(Yt)
            sel = Yt[b.rows]
            sel *= scale
            out[start:stop] = sel.T
        return out

    def _payload(self, b: _Built) -> dict[str, Any]:
        return {"signs": b.signs, "rows": b.rows}

    def _from_payload(self, z: Mapping[str, Any], d: int) -> _Built:
        signs = np.array(z["signs"], dtype=np.float64)
        rows = np.array(z["rows"], dtype=np.int64)
        return _Built(dense=srht_matrix(signs, rows, d, self.k), signs=signs, rows=rows)
