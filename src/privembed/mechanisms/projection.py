r"""Dimensionality reduction before noise: public JL projections, private projection, JL-only sketch.

Three things live here ([MC25] surveys all three):

* :class:`JLProjection` -- a *public* random projection :math:`P \in \mathbb R^{k\times d}`
  (dense Gaussian, Achlioptas sparse sign, or subsampled randomised Hadamard transform),
  derived from a public seed so every party that compares vectors uses the same ``P``.
* :class:`PrivateProjection` -- the Kenthapadi et al. mechanism ([KKMM13], [MC25] Alg. 1):
  :math:`y = Px + \mathcal N(0, \sigma^2 I_k)` with sigma calibrated to the sensitivity of
  ``P x`` under a stated neighbouring relation, plus the unbiased distance, inner-product and
  cosine estimators and a bias-corrected search over the releases ([MC25] §5.2).
* :class:`JLSketch` -- the JL-only sketch of Blocki et al. ([BBDS12], [MC25] §3.2/§5.1): a
  *secret* Gaussian matrix times a data matrix whose singular values are all large is itself
  differentially private; the class checks that precondition and refuses when it fails.

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. Table 1, Alg. 1,
   §3.2, §5.1, §5.2.
.. [KKMM13] Kenthapadi, Korolova, Mironov & Mishra (2013). Privacy via the Johnson-Lindenstrauss
   transform. Journal of Privacy and Confidentiality 5(1).
.. [BBDS12] Blocki, Blum, Datta & Sheffet (2012). The Johnson-Lindenstrauss transform itself
   preserves differential privacy. FOCS (arXiv:1204.2136).
.. [Ach03] Achlioptas (2003). Database-friendly random projections: Johnson-Lindenstrauss with
   binary coins. JCSS 66(4).
.. [AC09] Ailon & Chazelle (2009). The fast Johnson-Lindenstrauss transform and approximate
   nearest neighbors. SIAM J. Computing 39(1); Tropp (2011), Improved analysis of the subsampled
   randomized Hadamard transform.
.. [DG03] Dasgupta & Gupta (2003). An elementary proof of a theorem of Johnson and
   Lindenstrauss. Random Structures & Algorithms 22(1).
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from .. import theory
from .._validation import DataError, check_choice, check_embeddings, check_int, check_real
from ..accounting import ApproxDP, Guarantee, Neighbouring
from ..rng import NoiseSource, as_generator
from .base import Mechanism

__all__ = [
    "KINDS",
    "GraphSketch",
    "JLProjection",
    "JLSketch",
    "PrivateProjection",
    "blocki_threshold",
    "fwht",
    "jl_target_dim",
]

#: projection kinds, with the stable code that enters the public seed derivation
KINDS: tuple[str, ...] = ("gaussian", "sparse", "srht")
_KIND_CODE = {"gaussian": 1, "sparse": 2, "srht": 3}
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


# ------------------------------------------------------------------------------------------
# Public projections
# ------------------------------------------------------------------------------------------


@dataclass
class _Built:
    """Everything derived for one input dimension ``d`` (cached by :class:`JLProjection`)."""

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


class JLProjection:
    r"""A public Johnson-Lindenstrauss projection :math:`P \in \mathbb R^{k\times d}` ([MC25] Table 1).

    ``P`` is a deterministic function of ``(kind, d, k, seed)``: it is drawn from a PCG64
    generator seeded with ``SeedSequence([seed, kind_code, d, k])`` -- a fixed bit generator,
    independent of the noise-randomness policy in :mod:`privembed.rng` -- so every party that
    must compare vectors rebuilds the same matrix. It is **public**: never use it as a secret,
    and never draw it from the noise ``rng``. Because the draw depends on ``d``, matrices are
    built lazily for each input dimension seen and cached. :meth:`save` / :meth:`load` give a
    portable file (NumPy does not promise identical generator streams across versions).

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
    >>> P.matrix(6).shape
    (4, 6)
    >>> X = np.eye(6)
    >>> bool(np.allclose(P.apply(X), X @ P.matrix(6).T))
    True
    >>> round(P.max_column_norm(6), 12)
    1.0
    """

    def __init__(self, *, k: int, kind: str = "gaussian", seed: int = 0) -> None:
        self.k = check_int("k", k, ge=1)
        self.kind = check_choice("kind", kind, KINDS)
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

    # ---- construction -----------------------------------------------------------------------
    def padded_dim(self, d: int) -> int:
        """SRHT working dimension ``2**ceil(log2(max(d, k)))`` (``d`` for the other kinds)."""
        d = check_int("d", d, ge=1)
        return _next_pow2(max(d, self.k)) if self.kind == "srht" else d

    def _generator(self, d: int) -> np.random.Generator:
        ss = np.random.SeedSequence([self.seed, _KIND_CODE[self.kind], d, self.k])
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
        g = self._generator(d)
        k = self.k
        if self.kind == "gaussian":
            dense = g.standard_normal((k, d)) / math.sqrt(k)
            built = _Built(dense=dense)
        elif self.kind == "sparse":
            u = g.random((k, d))
            signs = np.where(u < 1.0 / 6.0, 1.0, np.where(u >= 5.0 / 6.0, -1.0, 0.0))
            dense = signs * math.sqrt(3.0 / k)
            built = _Built(dense=dense, sparse=sp.csr_matrix(dense))
        else:
            m = _next_pow2(max(d, k))
            flips = np.asarray(g.integers(0, 2, size=m) * 2.0 - 1.0, dtype=np.float64)
            rows = np.sort(g.choice(m, size=k, replace=False)).astype(np.int64)
            # H[i, j] = (-1)^{popcount(i & j)} (Sylvester ordering), only the rows/columns used.
            cols = np.arange(d, dtype=np.int64)
            parity = np.bitwise_count(rows[:, None] & cols[None, :]) & 1
            dense = (1.0 - 2.0 * parity) * flips[None, :d] / math.sqrt(k)
            built = _Built(dense=dense, signs=flips, rows=rows)
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
    def apply(self, X: Any) -> NDArray[np.floating[Any]]:
        """Project rows: ``X @ P.T`` for ``X`` of shape (n, d) or (d,).

        float32 input is projected in float32 (throughput), anything else in float64. The
        input is not modified. Gaussian uses BLAS, sparse uses ``scipy.sparse``, SRHT a blocked
        fast Walsh-Hadamard transform (``O(n m log m)`` instead of ``O(n k d)``).

        Raises
        ------
        privembed.DataError
            Wrong number of dimensions, empty input, NaN or inf.
        """
        arr, single = check_embeddings(X, allow_zero=True)
        out = self._apply2d(arr)
        return out[0] if single else out

    def _apply2d(self, X: NDArray[np.floating[Any]]) -> NDArray[np.floating[Any]]:
        d = X.shape[1]
        b = self._build(d)
        f32 = X.dtype == np.float32
        if self.kind == "gaussian":
            if f32:
                if b.f32 is None:
                    b.f32 = b.dense.astype(np.float32)
                return X @ b.f32.T
            return X @ b.dense.T
        if self.kind == "sparse":
            assert b.sparse is not None
            S = b.sparse
            if f32:
                if b.sparse_f32 is None:
                    b.sparse_f32 = b.sparse.astype(np.float32)
                S = b.sparse_f32
            return np.asarray(S @ np.ascontiguousarray(X.T)).T
        return self._srht(X, b)

    def _srht(self, X: NDArray[np.floating[Any]], b: _Built) -> NDArray[np.floating[Any]]:
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
            f"{_KIND_CODE[self.kind]}",
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
        }
        if self.kind == "gaussian":
            payload["matrix"] = b.dense
        elif self.kind == "sparse":
            assert b.sparse is not None
            payload.update(data=b.sparse.data, indices=b.sparse.indices, indptr=b.sparse.indptr)
        else:
            payload.update(signs=b.signs, rows=b.rows)
        with path.open("wb") as fh:
            np.savez(fh, **payload)
        return path

    @classmethod
    def load(cls, path: str | Path, *, verify: bool = True) -> tuple[JLProjection, int]:
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
            proj = cls(k=k, kind=kind, seed=seed)
            if kind == "gaussian":
                dense = np.array(z["matrix"], dtype=np.float64)
                built = _Built(dense=dense)
            elif kind == "sparse":
                S = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=(k, d))
                built = _Built(dense=S.toarray(), sparse=S)
            else:
                signs = np.array(z["signs"], dtype=np.float64)
                rows = np.array(z["rows"], dtype=np.int64)
                parity = np.bitwise_count(rows[:, None] & np.arange(d)[None, :]) & 1
                dense = (1.0 - 2.0 * parity) * signs[None, :d] / math.sqrt(k)
                built = _Built(dense=dense, signs=signs, rows=rows)
            stored = str(z["sha256"])
        if built.dense.shape != (k, d):
            raise DataError(f"{path}: matrix has shape {built.dense.shape}, expected {(k, d)}.")
        built.dense.setflags(write=False)
        proj._cache[d] = built
        if proj.fingerprint(d) != stored:
            raise DataError(f"{path}: the matrix does not match its stored SHA-256 (corrupted).")
        if verify and cls(k=k, kind=kind, seed=seed).fingerprint(d) != stored:
            raise DataError(
                f"{path}: this NumPy regenerates a different matrix from (kind={kind!r}, d={d}, "
                f"k={k}, seed={seed}); load with verify=False to trust the file."
            )
        return proj, d


# ------------------------------------------------------------------------------------------
# The private projection mechanism
# ------------------------------------------------------------------------------------------

_NEIGHBOURING = ("record", "attribute")


class PrivateProjection(Mechanism):
    r"""JL projection then Gaussian noise: :math:`y = Px + \mathcal N(0, \sigma^2 I_k)` ([MC25] Alg. 1).

    The projection :math:`P` is public (:attr:`projection`, from ``projection_seed``); only the
    noise is secret. Sigma is calibrated to the l2 sensitivity of :math:`x \mapsto Px` under the
    neighbouring relation that :attr:`guarantee` states:

    * ``"record"`` -- record-level LDP: any two inputs in the unit ball (inputs are normalised or
      clipped first), sensitivity :math:`2\|P\|_2` (exact spectral norm);
    * ``"attribute"`` -- attribute level as in [KKMM13]: inputs (after ``input_norm``) that differ
      in one coordinate by at most 1, sensitivity :math:`\max_j \|Pe_j\|_2`.

    Parameters
    ----------
    k : int, >= 1
        Output dimension.
    epsilon : float, > 0
    delta : float, in (0, 1)
    kind : {"gaussian", "sparse", "srht"}, default "gaussian"
        See :class:`JLProjection`.
    neighbouring : {"record", "attribute"}, default "record"
    calibration : {"analytic", "classic"}, default "analytic"
        ``"analytic"``: exact (epsilon, delta) ([BW18]). ``"classic"``:
        :math:`\sigma = \Delta\sqrt{2\ln(1.25/\delta)}/\varepsilon`, valid only for epsilon < 1;
        :attr:`guarantee` then reports the delta it really achieves.
    projection_seed : int, >= 0, default 0
        Public seed of ``P``; parties that compare releases must share it (and ``kind``, ``k``).
    input_norm : {"normalize", "clip", "none"}, default "normalize"
        ``"none"`` is allowed only with ``neighbouring="attribute"``, where the relation is on
        raw coordinates; record level needs the unit ball.
    renormalize : bool, default False
        Scale outputs to unit length (post-processing, guarantee unchanged). **Off by default,
        unlike the other mechanisms**: the unbiased estimators below (subtracting
        :math:`2k\sigma^2` etc.) and :meth:`search` need the raw outputs.
    input_dim : int, optional
        Build ``P`` (and sigma) for this input dimension now instead of on first use.

    Notes
    -----
    Sigma depends on the input dimension ``d`` through :math:`\|P\|_2` or the column norms, so
    ``P`` and sigma are built lazily for each ``d`` seen and cached (a pure function of ``d``:
    nothing depends on which batches came before); :attr:`sigma` is the value for the
    constructor's ``input_dim`` and :meth:`sigma_for` gives any ``d``. The guarantee does not
    depend on ``d``: sigma is recalibrated for each.

    For a Gaussian ``P``, :math:`\|P\|_2 \approx 1 + \sqrt{d/k}`, so at equal (epsilon, delta)
    record-level noise is :math:`\approx 1 + \sqrt{d/k}` times the full-dimension sigma. The
    noise an inner-product ranking sees, :math:`\langle Pq, z\rangle`, has standard deviation
    :math:`\sigma\|Pq\|`, so at record level projection cannot improve ranking against clean
    queries; it shrinks the *noise norm* (:math:`k\sigma^2` instead of :math:`d\sigma_0^2`),
    which is what matters for cosine to the input and noisy-vs-noisy comparisons, and only
    wins there under the attribute relation (see ``docs/projection.md``).

    Examples
    --------
    >>> m = PrivateProjection(k=16, epsilon=5.0, delta=1e-5, input_dim=64)
    >>> X = as_generator(0).standard_normal((3, 64))
    >>> m.privatize(X, rng=1).shape
    (3, 16)
    >>> sens = 2 * m.projection.spectral_norm(64)
    >>> bool(m.sigma == theory.analytic_gaussian_sigma(5.0, 1e-5, sens))
    True
    >>> m.guarantee.neighbouring
    'any two unit vectors (record level; l2 sensitivity of P x is 2*||P||_2)'
    """

    name = "projection"
    allowed_input_norms = ("normalize", "clip", "none")
    has_public_transform = True
    output_dim_param = "k"
    #: ``input_dim`` only builds P (and sigma) early; the law at each d does not depend on it
    law_independent_params = ("input_dim",)

    def __init__(
        self,
        *,
        k: int,
        epsilon: float,
        delta: float,
        kind: str = "gaussian",
        neighbouring: str = "record",
        calibration: str = "analytic",
        projection_seed: int = 0,
        input_norm: str = "normalize",
        renormalize: bool = False,
        input_dim: int | None = None,
    ) -> None:
        self.k = check_int("k", k, ge=1)
        self.epsilon = check_real("epsilon", epsilon, gt=0)
        self.delta = check_real("delta", delta, gt=0, lt=1)
        self.kind = check_choice("kind", kind, KINDS)
        self.neighbouring = check_choice("neighbouring", neighbouring, _NEIGHBOURING)
        self.calibration = check_choice("calibration", calibration, ("analytic", "classic"))
        self.projection_seed = check_int("projection_seed", projection_seed, ge=0)
        self._init_common(input_norm, renormalize)
        if self.neighbouring == "record" and self.input_norm == "none":
            raise ValueError(
                "input_norm='none' bounds no distance between records; neighbouring='record' "
                "needs input_norm='normalize' or 'clip', got input_norm='none'."
            )
        self.projection = JLProjection(k=self.k, kind=self.kind, seed=self.projection_seed)
        self._sigmas: dict[int, float] = {}
        self._input_dim: int | None = None
        if input_dim is not None:
            self._input_dim = check_int("input_dim", input_dim, ge=1)
            self.check_dim(self._input_dim)

    # ---- calibration ------------------------------------------------------------------------
    def sensitivity(self, d: int) -> float:
        r"""l2 sensitivity of :math:`x \mapsto Px` for input dimension ``d`` and the relation."""
        if self.neighbouring == "record":
            return 2.0 * self.projection.spectral_norm(d)
        return self.projection.max_column_norm(d)

    def sigma_for(self, d: int) -> float:
        """Noise standard deviation for input dimension ``d`` (cached)."""
        d = check_int("d", d, ge=1)
        s = self._sigmas.get(d)
        if s is None:
            sens = self.sensitivity(d)
            if self.calibration == "analytic":
                s = theory.analytic_gaussian_sigma(self.epsilon, self.delta, sens)
            else:
                s = theory.classic_gaussian_sigma(self.epsilon, self.delta, sens)
            self._sigmas[d] = s
        return s

    @property
    def sigma(self) -> float:
        """Noise standard deviation for the constructor's ``input_dim``.

        Raises
        ------
        ValueError
            No ``input_dim`` was given (use :meth:`sigma_for`).
        """
        if self._input_dim is None:
            raise ValueError(
                "sigma depends on the input dimension d; pass input_dim=d to the constructor "
                "or call sigma_for(d)."
            )
        return self.sigma_for(self._input_dim)

    @property
    def input_dim(self) -> int | None:
        """The input dimension given to the constructor (``None`` if none was)."""
        return self._input_dim

    def output_dim(self, d: int) -> int:
        return self.k

    def check_dim(self, d: int) -> None:
        """Refuse a dimension the configuration cannot serve (too large a matrix, or a
        dimension other than the constructor's ``input_dim``); calibrates sigma for ``d``."""
        d = check_int("d", d, ge=1)
        if self._input_dim is not None and d != self._input_dim:
            raise DataError(
                f"X has dimension {d} but this projection was built for input_dim="
                f"{self._input_dim} (dimension mismatch)."
            )
        self.projection.check_size(d)
        self.sigma_for(d)

    def release_metadata(self, d: int) -> dict[str, Any]:
        """Projection description plus sigma and sensitivity, for file metadata (``info``)."""
        d = self._require_d(d)
        return {
            "projection": {
                **self.projection.metadata(d),
                "neighbouring": self.neighbouring,
                "sensitivity": self.sensitivity(d),
                "sigma": self.sigma_for(d),
            }
        }

    # ---- guarantee --------------------------------------------------------------------------
    def _relation(self) -> str:
        if self.neighbouring == "record":
            dom = "unit vectors" if self.input_norm == "normalize" else "inputs in the unit ball"
            return f"any two {dom} (record level; l2 sensitivity of P x is 2*||P||_2)"
        pre = {
            "normalize": "unit-normalised inputs",
            "clip": "inputs clipped to the unit ball",
            "none": "inputs",
        }[self.input_norm]
        return (
            f"{pre} that differ in one coordinate by at most 1 (attribute level, Kenthapadi "
            "et al.; l2 sensitivity of P x is max_j ||P e_j||_2)"
        )

    @property
    def guarantee(self) -> Guarantee:
        """(epsilon, delta)-LDP for the stated relation, computed from the actual sigma.

        With ``calibration="classic"`` the delta is the one the classic sigma really achieves
        (sigma / sensitivity does not depend on ``d``, so neither does the guarantee).
        """
        rel = self._relation()
        proj = f"public {self.kind} projection k={self.k}, seed={self.projection_seed}"
        relation = Neighbouring.RECORD if self.neighbouring == "record" else Neighbouring.ATTRIBUTE
        if self.calibration == "analytic":
            ratio = theory.analytic_gaussian_sigma(self.epsilon, self.delta, 1.0)
            return ApproxDP(
                self.epsilon,
                self.delta,
                neighbouring=rel,
                note=f"analytic Gaussian calibration (Balle & Wang 2018); {proj}",
                relation=relation,
                noise_multiplier=ratio,
            )
        ratio = theory.classic_gaussian_sigma(self.epsilon, self.delta, 1.0)
        achieved = theory.analytic_gaussian_delta(ratio, self.epsilon, 1.0)
        if achieved <= self.delta:
            note = (
                f"classic calibration; exact delta at this epsilon is {achieved:.3g} "
                f"(requested {self.delta:.3g}); {proj}"
            )
            return ApproxDP(
                self.epsilon,
                self.delta,
                neighbouring=rel,
                note=note,
                relation=relation,
                noise_multiplier=ratio,
            )
        eps_at_delta = theory.analytic_gaussian_epsilon(ratio, self.delta, 1.0)
        note = (
            f"classic calibration under-noises: requested delta={self.delta:.3g} but the "
            f"exact delta at epsilon={self.epsilon:g} is {achieved:.3g}; at delta="
            f"{self.delta:.3g} the true epsilon is {eps_at_delta:.4g}; {proj}"
        )
        return ApproxDP(
            self.epsilon,
            min(1.0, achieved),
            neighbouring=rel,
            note=note,
            relation=relation,
            noise_multiplier=ratio,
        )

    # ---- the release ------------------------------------------------------------------------
    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        d = X.shape[1]
        Y = np.asarray(self.projection._apply2d(X), dtype=np.float64)
        noise = source.normal(X.shape[0], self.k)
        noise *= self.sigma_for(d)
        noise += Y
        return noise

    def public_transform(self, X: Any) -> NDArray[np.floating[Any]]:
        """Same as :meth:`project` (the :class:`Mechanism` hook)."""
        return self.project(X)

    @property
    def public_transform_key(self) -> Any:
        """(kind, projection_seed): with the same ``k``, the same public ``P``."""
        return (self.kind, self.projection_seed)

    def expected_cosine(self, d: int) -> float | None:
        """E[cos(Px, Px + z)] for ``x`` with ``|Px| = 1``: the Gaussian law in ``k`` dimensions
        with this projection's sigma at input dimension ``d``."""
        return theory.expected_cosine_gaussian(self.sigma_for(d), self.k)

    def project(self, X: Any) -> NDArray[np.floating[Any]]:
        """``P`` applied to inputs prepared like releases (``input_norm``) but with no noise.

        This is what a querying party that holds plain embeddings sends to :meth:`search`.
        """
        arr, single = check_embeddings(X, allow_zero=self.input_norm == "none")
        out = self.projection._apply2d(self.prepare_inputs(arr))
        return out[0] if single else out

    # ---- unbiased estimators ([MC25] §5.2) ---------------------------------------------------
    def _require_d(self, d: int | None) -> int:
        if d is not None:
            return check_int("d", d, ge=1)
        if self._input_dim is None:
            raise ValueError(
                "the input dimension d is not known; pass d=... (or input_dim= to the constructor)."
            )
        return self._input_dim

    def _noise_var(self, d: int | None) -> float:
        return self.sigma_for(self._require_d(d)) ** 2

    def squared_distance_estimate(
        self, y_i: Any, y_j: Any, *, d: int | None = None, released: int = 2
    ) -> Any:
        r"""Unbiased estimate of :math:`\|P(x_i - x_j)\|^2` ([MC25] §5.2).

        .. math:: \widehat{D}_{ij} = \|y_i - y_j\|^2 - 2k\sigma^2

        for two releases with independent noise (``released=2``); with one side a noiseless
        projection (:meth:`project`), ``released=1`` subtracts :math:`k\sigma^2`. Works row-wise
        on arrays of shape (k,) or (n, k). JL makes :math:`\|P(x_i-x_j)\|^2 \approx
        \|x_i-x_j\|^2`. Not valid for a release compared with itself (same noise).
        """
        released = check_int("released", released, ge=1, le=2)
        a = np.asarray(y_i, dtype=np.float64)
        b = np.asarray(y_j, dtype=np.float64)
        return np.sum((a - b) ** 2, axis=-1) - released * self.k * self._noise_var(d)

    def inner_product_estimate(self, y_i: Any, y_j: Any) -> Any:
        r"""Unbiased estimate of :math:`\langle Px_i, Px_j\rangle`: the plain inner product.

        Unbiased whenever the two noises are independent (no correction needed); for a
        squared norm use :meth:`squared_norm_estimate`.
        """
        return np.sum(np.asarray(y_i, dtype=np.float64) * np.asarray(y_j, dtype=np.float64), -1)

    def squared_norm_estimate(self, y: Any, *, d: int | None = None) -> Any:
        r"""Unbiased estimate of :math:`\|Px\|^2`: :math:`\|y\|^2 - k\sigma^2`."""
        y = np.asarray(y, dtype=np.float64)
        return np.sum(y**2, axis=-1) - self.k * self._noise_var(d)

    def cosine_estimate(self, y_i: Any, y_j: Any, *, d: int | None = None) -> Any:
        r"""Calibrated estimate of :math:`\cos(Px_i, Px_j)` (:math:`\approx \cos(x_i, x_j)` by JL)
        from two independent releases.

        .. math::
            \widehat{\cos}_{ij} = \frac{\langle y_i, y_j\rangle}
            {\sqrt{(\|y_i\|^2 - k\sigma^2)(\|y_j\|^2 - k\sigma^2)}}

        -- the unbiased inner product over the bias-corrected norms, with each corrected
        squared norm floored at a tiny positive value and the ratio clipped to [-1, 1].
        Consistent, not exactly unbiased; unstable once :math:`k\sigma^2` is comparable with
        :math:`\|Px\|^2` (the corrected norms then fluctuate around zero). Dividing by the *raw*
        norms instead shrinks every value towards 0 by about :math:`\|Px\|/\|y\|`; for
        *ranking*, however, that raw cosine does better (see :meth:`search`).
        """
        ip = self.inner_product_estimate(y_i, y_j)
        floor = 1e-12
        ni = np.maximum(self.squared_norm_estimate(y_i, d=d), floor)
        nj = np.maximum(self.squared_norm_estimate(y_j, d=d), floor)
        return np.clip(ip / np.sqrt(ni * nj), -1.0, 1.0)

    def search(
        self,
        queries: Any,
        database: Any,
        k: int,
        *,
        metric: str = "cosine",
        queries_released: bool = False,
        d: int | None = None,
        database_sigma: Any = None,
        batch_size: int = 1024,
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        r"""k-nearest-neighbour search over releases with calibrated scores, FAISS conventions.

        Parameters
        ----------
        queries : array_like, shape (nq, d) or (nq, k)
            Plain embeddings (projected here without noise, after ``input_norm``), or -- with
            ``queries_released=True`` -- releases of this mechanism (independent noise).
        database : array_like, shape (n, k)
            Releases of this mechanism (not renormalised).
        k : int
            Neighbours per query (``min(k, n)`` are real; the rest are padded like FAISS:
            index -1, distance ``inf`` for l2 and ``-inf`` otherwise).
        metric : {"cosine", "cosine_corrected", "ip", "l2"}
            ``"cosine"`` (default, the best *ranking* we measured): plain cosine between the
            query and each raw release, :math:`\langle q, y_j\rangle/(\|q\|\|y_j\|)` --
            what FAISS ``IndexFlatIP`` over L2-normalised vectors returns; its values are
            shrunk towards 0 by the noise. ``"cosine_corrected"``: :meth:`cosine_estimate`
            (bias-corrected norms), calibrated values for thresholds but a noisier ranking
            when :math:`k\sigma^2` is comparable with :math:`\|Px\|^2`. ``"ip"``: unbiased
            :math:`\langle Pq, Px_j\rangle`. ``"l2"``: unbiased squared distances
            :math:`\|q - y_j\|^2 - k(\sigma_q^2 + \sigma_j^2)` (ascending).
        queries_released : bool, default False
        d : int, optional
            Input dimension (default: the most recent one); fixes sigma.
        database_sigma : float or array_like of shape (n,), optional
            Noise sigma of each database row (default: this mechanism's sigma for ``d``), e.g.
            for a database that holds releases made at different epsilon.
        batch_size : int, default 1024
            Queries scored per block (bounds memory at ``batch_size * n`` floats).

        Returns
        -------
        D : ndarray of float32, shape (nq, k)
            Similarities (descending) or squared distances (ascending).
        I : ndarray of int64, shape (nq, k)
            Database row indices.

        Notes
        -----
        Where the bias correction matters for ranking: for ``"ip"`` nowhere (the inner product
        of independent releases is already unbiased); for ``"l2"`` the correction is a
        constant per query with one common sigma -- the ranking is FAISS ``IndexFlatL2``'s and
        only the values (range search, thresholds) change -- but with per-row
        ``database_sigma`` it reorders rows released at different noise levels. For cosine,
        on real embeddings (``docs/projection.md``) dividing by the *observed* norm ranks
        better than both the raw inner product (JL leaves the projected norms
        :math:`\|Px_j\|` uneven at small ``k``) and the bias-corrected norms (their noise
        inflates the scores of rows with small corrected norm).
        """
        metric = check_choice("metric", metric, ("cosine", "cosine_corrected", "ip", "l2"))
        kk = check_int("k", k, ge=1)
        bs = check_int("batch_size", batch_size, ge=1)
        Y, _ = check_embeddings(database, name="database", dim=self.k, allow_zero=True)
        Y = np.asarray(Y, dtype=np.float64)
        n = Y.shape[0]
        if queries_released:
            dd = self._require_d(d)
            Q, _ = check_embeddings(queries, name="queries", dim=self.k, allow_zero=True)
            Q = np.asarray(Q, dtype=np.float64)
            q_var = self.sigma_for(dd) ** 2
        else:
            Q, _ = check_embeddings(queries, name="queries", allow_zero=self.input_norm == "none")
            dd = Q.shape[1] if d is None else check_int("d", d, ge=1)
            if Q.shape[1] != dd:
                raise DataError(f"queries have dimension {Q.shape[1]} but d={dd} was given.")
            Q = np.asarray(self.projection._apply2d(self.prepare_inputs(Q)))
            q_var = 0.0
        if database_sigma is None:
            y_var: NDArray[np.float64] = np.full(n, self.sigma_for(dd) ** 2)
        else:
            s = np.asarray(database_sigma, dtype=np.float64)
            if s.ndim > 1 or (s.ndim == 1 and s.shape[0] != n) or not np.all(s >= 0):
                raise ValueError(
                    "database_sigma must be a non-negative scalar or one value per database "
                    f"row ({n}), got shape {s.shape}."
                )
            y_var = np.broadcast_to(s**2, (n,)).astype(np.float64)
        ascending = metric == "l2"
        y_sq = np.sum(Y**2, axis=1)
        y_norm = None
        if metric == "cosine":
            y_norm = np.sqrt(y_sq)
        elif metric == "cosine_corrected":
            y_norm = np.sqrt(np.maximum(y_sq - self.k * y_var, 1e-12))
        nq = Q.shape[0]
        take = min(kk, n)
        D = np.full((nq, kk), np.inf if ascending else -np.inf, dtype=np.float32)
        I = np.full((nq, kk), -1, dtype=np.int64)  # noqa: E741 - FAISS's name
        for start in range(0, nq, bs):
            q = Q[start : start + bs]
            S = q @ Y.T
            if metric == "l2":
                q_sq = np.sum(q**2, axis=1)
                S = q_sq[:, None] + y_sq[None, :] - 2.0 * S - self.k * (q_var + y_var[None, :])
            elif metric == "cosine":
                assert y_norm is not None
                den = np.sqrt(np.sum(q**2, axis=1))[:, None] * y_norm[None, :]
                S = np.divide(S, den, out=np.zeros_like(S), where=den > 0)
            elif metric == "cosine_corrected":
                assert y_norm is not None
                q_norm = np.sqrt(np.maximum(np.sum(q**2, axis=1) - self.k * q_var, 1e-12))
                S = np.clip(S / (q_norm[:, None] * y_norm[None, :]), -1.0, 1.0)
            key = S if ascending else -S
            if take < n:
                part = np.argpartition(key, take - 1, axis=1)[:, :take]
            else:
                part = np.broadcast_to(np.arange(n), key.shape).copy()
            order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1, kind="stable")
            idx = np.take_along_axis(part, order, axis=1)
            D[start : start + q.shape[0], :take] = np.take_along_axis(S, idx, axis=1)
            I[start : start + q.shape[0], :take] = idx
        return D, I


# ------------------------------------------------------------------------------------------
# The JL-only sketch (Blocki et al.)
# ------------------------------------------------------------------------------------------


def blocki_threshold(epsilon: float, delta: float, r: int) -> float:
    r"""Minimum singular value ``w`` that makes an ``r``-row Gaussian JL sketch (epsilon, delta)-DP.

    .. math:: w = \frac{16\sqrt{r\ln(2/\delta)}}{\varepsilon}\,\ln\frac{16r}{\delta}

    ([BBDS12] Thm 3.1), for neighbouring data matrices that differ in one row by a vector of
    l2 norm at most 1. The bound is loose by design of the proof; it grows like
    :math:`\sqrt r\,\log r`.

    Examples
    --------
    >>> round(blocki_threshold(1.0, 1e-5, 10), 1)
    2932.3
    """
    epsilon = check_real("epsilon", epsilon, gt=0)
    delta = check_real("delta", delta, gt=0, lt=1)
    r = check_int("r", r, ge=1)
    return 16.0 * math.sqrt(r * math.log(2.0 / delta)) * math.log(16.0 * r / delta) / epsilon


@dataclass(frozen=True)
class GraphSketch:
    r"""A released JL sketch of a graph's (overlaid) edge-incidence matrix ([BBDS12] Alg. 1).

    Attributes
    ----------
    sketch : ndarray, shape (r, n_vertices)
        :math:`M E_G` with :math:`M` a secret r-row Gaussian matrix.
    n_vertices : int
    overlay_weight : float
        Weight :math:`\omega` of the complete graph laid over every non-edge.
    """

    sketch: NDArray[np.float64]
    n_vertices: int
    overlay_weight: float

    def cut(self, S: Iterable[int]) -> float:
        r"""Unbiased estimate of the number of edges crossing :math:`(S, \bar S)`.

        .. math:: \widehat{\Phi}(S) = \frac{\|M E_G 1_S\|^2/r - \omega|S|(n-|S|)}{1-\omega}
        """
        n = self.n_vertices
        idx = np.unique(np.fromiter((int(v) for v in S), dtype=np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= n):
            raise ValueError(f"S must hold vertex indices in [0, {n}), got {idx.tolist()!r}.")
        r = self.sketch.shape[0]
        v = self.sketch[:, idx].sum(axis=1)
        s = idx.size
        w = self.overlay_weight
        return float((v @ v / r - w * s * (n - s)) / (1.0 - w))


class JLSketch:
    r"""The JL-only sketch of Blocki et al. ([BBDS12], [MC25] §3.2/§5.1): no added noise.

    Releases :math:`R = MA` for a data matrix :math:`A \in \mathbb R^{n\times d}` (one record
    per row) and a **secret** :math:`M \in \mathbb R^{r\times n}` of i.i.d. N(0, 1) entries
    drawn from the noise ``rng`` (never from a public seed: here the projection *is* the noise).
    In the issue's notation, with :math:`X = A^\top` holding one record per column and
    :math:`P = M`, this is :math:`Y = XP^\top = R^\top`.

    If every singular value of :math:`A` and of its neighbours is at least
    ``w = row_bound * blocki_threshold(epsilon, delta, r)``, the release is (epsilon, delta)-DP
    for matrices that differ in one row by a vector of norm at most ``row_bound``. The class
    checks this and **refuses** (``ValueError``) rather than release without a guarantee:

    * ``smoothing=False``: requires :math:`n \ge d` and :math:`\sigma_{\min}(A) \ge w +`
      ``row_bound`` (Weyl's inequality then gives every neighbour :math:`\sigma_{\min} \ge w`).
      The refusal itself depends on the data; the guarantee is meant for settings where the
      condition holds for every admissible data set.
    * ``smoothing=True``: releases :math:`M[A; wI_d]`, the public, deterministic alteration of
      [BBDS12]: singular values become :math:`\sqrt{\sigma_i^2 + w^2} \ge w` for every data
      set, so the guarantee is unconditional; :meth:`covariance_estimate` removes the
      :math:`w^2 I` it adds.

    Parameters
    ----------
    r : int, >= 1
        Sketch rows.
    epsilon : float, > 0
    delta : float, in (0, 1)
    smoothing : bool, default False
    row_bound : float, > 0, default 1
        l2 bound on the change of one row between neighbours (rescales ``w``).

    Examples
    --------
    >>> s = JLSketch(r=5, epsilon=10.0, delta=1e-3)
    >>> round(s.threshold, 1)
    111.4
    >>> s.release(np.eye(3), rng=0)
    Traceback (most recent call last):
    ...
    ValueError: JL-only sketch refused: the smallest singular value of the data matrix is 1 but the guarantee needs >= 112.4 (w=111.4 for r=5, epsilon=10, delta=0.001, plus the row-change bound 1 so every neighbour also qualifies); use smoothing=True or a larger epsilon.
    >>> JLSketch(r=5, epsilon=10.0, delta=1e-3, smoothing=True).release(np.eye(3), rng=0).shape
    (5, 3)
    """

    def __init__(
        self,
        *,
        r: int,
        epsilon: float,
        delta: float,
        smoothing: bool = False,
        row_bound: float = 1.0,
    ) -> None:
        self.r = check_int("r", r, ge=1)
        self.epsilon = check_real("epsilon", epsilon, gt=0)
        self.delta = check_real("delta", delta, gt=0, lt=1)
        if not isinstance(smoothing, bool):
            raise TypeError(f"smoothing must be a bool, got smoothing={smoothing!r}.")
        self.smoothing = smoothing
        self.row_bound = check_real("row_bound", row_bound, gt=0)

    def __repr__(self) -> str:
        return (
            f"JLSketch(r={self.r}, epsilon={self.epsilon!r}, delta={self.delta!r}, "
            f"smoothing={self.smoothing}, row_bound={self.row_bound!r})"
        )

    @property
    def threshold(self) -> float:
        """``w``: the singular-value floor the guarantee needs (scaled by ``row_bound``)."""
        return self.row_bound * blocki_threshold(self.epsilon, self.delta, self.r)

    @property
    def required_singular_value(self) -> float:
        """What :meth:`check` demands of the data: ``w + row_bound`` (0 with smoothing)."""
        return 0.0 if self.smoothing else self.threshold + self.row_bound

    @property
    def guarantee(self) -> Guarantee:
        """Central (epsilon, delta)-DP of the whole released matrix (not per-vector LDP)."""
        how = (
            f"public smoothing [A; {self.threshold:.4g} I]"
            if self.smoothing
            else f"checked smallest singular value >= {self.required_singular_value:.4g}"
        )
        return ApproxDP(
            self.epsilon,
            self.delta,
            neighbouring=(
                f"data matrices differing in one row by a vector of l2 norm <= {self.row_bound:g}"
            ),
            note=f"JL-only sketch (Blocki et al. 2012), r={self.r}; {how}",
        )

    @staticmethod
    def singular_values(A: Any) -> NDArray[np.float64]:
        """All ``d`` singular values of ``A`` (n, d), descending; zeros when ``n < d``."""
        arr, _ = check_embeddings(A, name="A", allow_zero=True)
        s = np.linalg.svd(np.asarray(arr, dtype=np.float64), compute_uv=False)
        d = arr.shape[1]
        return np.concatenate([s, np.zeros(d - s.size)]) if s.size < d else s

    def check(self, A: Any) -> float:
        """Return the smallest singular value of ``A``; raise ValueError if it is too small.

        With ``smoothing=True`` any ``A`` passes (the smoothing supplies the floor).
        """
        smin = float(self.singular_values(A)[-1])
        if not self.smoothing and smin < self.required_singular_value:
            raise ValueError(
                "JL-only sketch refused: the smallest singular value of the data matrix is "
                f"{smin:.4g} but the guarantee needs >= {self.required_singular_value:.4g} "
                f"(w={self.threshold:.4g} for r={self.r}, epsilon={self.epsilon:g}, "
                f"delta={self.delta:g}, plus the row-change bound {self.row_bound:g} so every "
                "neighbour also qualifies); use smoothing=True or a larger epsilon."
            )
        return smin

    def release(self, A: Any, *, rng: Any = None) -> NDArray[np.float64]:
        """Check the precondition and return the sketch ``M A`` (or ``M [A; w I]``), shape (r, d).

        Raises
        ------
        ValueError
            The singular-value precondition fails (see :meth:`check`).
        """
        self.check(A)
        arr, _ = check_embeddings(A, name="A", allow_zero=True)
        A2 = np.asarray(arr, dtype=np.float64)
        if self.smoothing:
            A2 = np.vstack([A2, self.threshold * np.eye(A2.shape[1])])
        M = as_generator(rng).standard_normal((self.r, A2.shape[0]))
        return M @ A2

    def covariance_estimate(self, R: Any) -> NDArray[np.float64]:
        r"""Unbiased estimate of :math:`A^\top A` from a release: :math:`R^\top R/r` (minus
        :math:`w^2 I` with smoothing)."""
        R = np.asarray(R, dtype=np.float64)
        if R.ndim != 2 or R.shape[0] != self.r:
            raise DataError(f"R must have shape (r={self.r}, d), got shape {R.shape}.")
        C = R.T @ R / self.r
        if self.smoothing:
            C -= self.threshold**2 * np.eye(C.shape[0])
        return C

    def graph_overlay_weight(self, n_vertices: int) -> float:
        r"""Weight :math:`\omega = 2w^2/n` of the complete graph laid over the non-edges.

        One edge changes one row of :math:`E_G` by at most :math:`\sqrt2(1-\sqrt\omega)`, so the
        graph sketch uses ``row_bound`` :math:`\sqrt2`; the overlay gives the Laplacian
        eigenvalues :math:`\ge \omega n = 2w^2` on :math:`1^\perp` for *every* graph.
        """
        n = check_int("n_vertices", n_vertices, ge=2)
        w = blocki_threshold(self.epsilon, self.delta, self.r)
        return 2.0 * w * w / n

    def release_graph(
        self, edges: Iterable[tuple[int, int]], n_vertices: int, *, rng: Any = None
    ) -> GraphSketch:
        r"""Sketch of a graph that answers every cut query ([BBDS12] Alg. 1), edge-level DP.

        Every pair :math:`u<v` gets weight 1 if it is an edge and :math:`\omega` otherwise
        (:meth:`graph_overlay_weight`); the release is :math:`M E_G` for the weighted
        :math:`\binom n2 \times n` incidence matrix (cost :math:`O(r n^2)`).

        Raises
        ------
        ValueError
            :math:`\omega > 1`: the graph has too few vertices (:math:`n < 2w^2`) for the
            overlay to give the guarantee; or an edge is invalid.
        """
        n = check_int("n_vertices", n_vertices, ge=2)
        omega = self.graph_overlay_weight(n)
        if omega > 1.0:
            w = blocki_threshold(self.epsilon, self.delta, self.r)
            raise ValueError(
                f"JL-only graph sketch refused: n_vertices={n} is below 2*w^2={2 * w * w:.4g} "
                f"(w={w:.4g} for r={self.r}, epsilon={self.epsilon:g}, delta={self.delta:g}), "
                "so the overlay cannot raise every singular value to the required floor."
            )
        iu, ju = np.triu_indices(n, k=1)
        weight = np.full(iu.size, omega)
        e = np.asarray(list(edges), dtype=np.int64).reshape(-1, 2)
        if e.size:
            if e.min() < 0 or e.max() >= n or np.any(e[:, 0] == e[:, 1]):
                raise ValueError(f"edges must join two distinct vertices in [0, {n}).")
            lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
            # position of pair (lo, hi) in the triu_indices order
            pos = lo * n - lo * (lo + 1) // 2 + (hi - lo - 1)
            weight[pos] = 1.0
        root = np.sqrt(weight)
        npairs = iu.size
        inc = sp.csr_matrix(
            (
                np.concatenate([root, -root]),
                (np.concatenate([np.arange(npairs)] * 2), np.concatenate([iu, ju])),
            ),
            shape=(npairs, n),
        )
        M = as_generator(rng).standard_normal((self.r, npairs))
        sketch = np.asarray((inc.T @ M.T).T)
        return GraphSketch(sketch=sketch, n_vertices=n, overlay_weight=omega)
