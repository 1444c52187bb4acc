r"""Differentially private PCA of the private corpus, and the ledger charge of its basis.

:func:`dp_pca` releases the sum of the corpus' unit rows and their second-moment matrix with one
Gaussian mechanism (Analyze Gauss [DTTZ14] with the mean; :class:`SecondMoments` accumulates them
in one pass, :class:`NoisyMoments` is the release) and post-processes the release into a
:class:`~privembed.mechanisms.subspace_basis.SubspaceBasis` carrying the central (epsilon_p,
delta_p) guarantee. That guarantee is charged once to every record the basis was computed from
(:func:`charge_basis`, staging a :class:`BasisCharge` in the ledger).

References
----------
.. [DTTZ14] Dwork, Talwar, Thakurta, Zhang (2014). Analyze Gauss: optimal bounds for
   privacy-preserving principal component analysis. STOC.
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core import theory
from ..core._validation import DataError, check_embeddings, check_int, check_keywords, check_real
from ..core.accounting import ApproxDP, Guarantee, Neighbouring
from ..core.rng import as_generator
from .base import unit_rows
from .subspace_basis import SubspaceBasis, leading_components

__all__ = [
    "BasisCharge",
    "GaussRelease",
    "NoisyMoments",
    "SecondMoments",
    "charge_basis",
    "dp_pca",
    "dp_pca_sensitivity",
]

#: weight of the sum of rows next to the second-moment matrix in DP-PCA's one Gaussian release
DEFAULT_MEAN_WEIGHT = 0.25


# which keys are required is said by each class's totality: NotRequired inside these postponed
# (string) annotations is not seen at run time, where check_keywords reads the required keys
class _GaussPrivacy(TypedDict):
    """The release's (epsilon, delta): required."""

    epsilon: float
    delta: float


class GaussRelease(_GaussPrivacy, total=False):
    """The keywords of DP-PCA's one Gaussian release, which :func:`dp_pca` passes on to
    :meth:`SecondMoments.release` (see :func:`dp_pca` for their meaning).

    Attributes
    ----------
    epsilon, delta : float
        Central DP parameters of the release (required).
    mean_weight : float, default :data:`DEFAULT_MEAN_WEIGHT`
        The weight ``a`` of the sum of rows next to the second-moment matrix.
    rng : int, Generator or None, default None
    """

    mean_weight: float
    rng: Any


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

    def release(self, **params: Unpack[GaussRelease]) -> NoisyMoments:
        r"""The one Gaussian release of DP-PCA: :math:`(a s + g, \mathrm{upper}(M) + G)`.

        ``g`` and the upper triangle ``G`` (diagonal included) are i.i.d.
        :math:`\mathcal N(0, \sigma^2)` with sigma the analytic calibration of (epsilon,
        delta) at :func:`dp_pca_sensitivity`; the matrix is symmetrised from its upper
        triangle and the sum divided back by ``a`` (post-processing). ``params``:
        :class:`GaussRelease` (``epsilon``, ``delta``, ``mean_weight``, ``rng``).

        Raises
        ------
        DataError
            Fewer than 2 rows.
        """
        check_keywords("SecondMoments.release", params, GaussRelease)
        epsilon = check_real("epsilon", params["epsilon"], gt=0)
        delta = check_real("delta", params["delta"], gt=0, lt=1)
        a = check_real("mean_weight", params.get("mean_weight", DEFAULT_MEAN_WEIGHT), gt=0)
        if self.n < 2:
            raise DataError(f"DP-PCA needs at least 2 records, got {self.n}.")
        sens = dp_pca_sensitivity(a)
        sigma = theory.analytic_gaussian_sigma(epsilon, delta, sens)
        gen = as_generator(params.get("rng"))
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
        components, spectrum = leading_components(C, max_components)
        meta = {
            "source": "dp-pca",
            "n": n,
            "mean_weight": self.mean_weight,
            "sigma": self.sigma,
            **(metadata or {}),
        }
        return SubspaceBasis(
            components,
            mean,
            spectrum=spectrum,
            guarantee=self.guarantee,
            noise_floor=math.sqrt(d) * self.sigma / n,
            n_records=n,
            metadata=meta,
        )


def dp_pca(
    corpus: Any,
    *,
    max_components: int | None = None,
    metadata: dict[str, Any] | None = None,
    **release: Unpack[GaussRelease],
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
    check_keywords("dp_pca", release, GaussRelease)
    if isinstance(corpus, SecondMoments):
        acc = corpus
    else:
        A, _ = check_embeddings(corpus, name="corpus")
        if A.ndim != 2:
            raise DataError("corpus must be an (n, d) array.")
        acc = SecondMoments(A.shape[1])
        acc.add(A)
    released = acc.release(**release)
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
