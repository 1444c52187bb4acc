r"""The private projection: a public JL projection, then Gaussian noise ([MC25] Alg. 1).

:class:`PrivateProjection` is the Kenthapadi et al. mechanism ([KKMM13]):
:math:`y = Px + \mathcal N(0, \sigma^2 I_k)` with ``P`` a public
:class:`~privembed.mechanisms.jl.JLProjection` and sigma calibrated to the sensitivity of
``P x`` under a stated neighbouring relation, with the unbiased distance, inner-product and
cosine estimators of [MC25] §5.2. The bias-corrected k-NN search over its releases is
:func:`privembed.search.projection.projection_search`; the JL-only sketch of Blocki et al. (central DP,
no added noise) is in :mod:`privembed.mechanisms.sketches`.

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. Table 1, Alg. 1,
   §5.2.
.. [KKMM13] Kenthapadi, Korolova, Mironov & Mishra (2013). Privacy via the Johnson-Lindenstrauss
   transform. Journal of Privacy and Confidentiality 5(1).
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import theory
from ..core._validation import DataError, check_choice, check_embeddings, check_int, check_real
from ..core.accounting import Guarantee, Neighbouring
from ..core.rng import NoiseSource
from .base import Mechanism
from .gaussian import gaussian_guarantee
from .jl import KINDS, JLProjection

__all__ = ["PrivateProjection", "require_projection"]

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
        :math:`2k\sigma^2` etc.) and :func:`privembed.search.projection.projection_search` need the raw
        outputs.
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
    >>> from privembed.core.rng import as_generator
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
        d = self.known_dim(d)
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
        relation = Neighbouring.RECORD if self.neighbouring == "record" else Neighbouring.ATTRIBUTE
        if self.calibration == "analytic":
            ratio = theory.analytic_gaussian_sigma(self.epsilon, self.delta, 1.0)
        else:
            ratio = theory.classic_gaussian_sigma(self.epsilon, self.delta, 1.0)
        proj = f"public {self.kind} projection k={self.k}, seed={self.projection_seed}"
        return gaussian_guarantee(self, ratio, self._relation(), relation, proj)

    # ---- the release ------------------------------------------------------------------------
    def _perturb(self, X: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        d = X.shape[1]
        Y = np.asarray(self.projection.apply(X, check_input=False), dtype=np.float64)
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

        This is what a querying party that holds plain embeddings compares with releases
        (:func:`privembed.search.projection.projection_search` does this for its queries).
        """
        arr, single = check_embeddings(X, allow_zero=self.input_norm == "none")
        out = self.projection.apply(self.prepare_inputs(arr), check_input=False)
        return out[0] if single else out

    # ---- unbiased estimators ([MC25] §5.2) ---------------------------------------------------
    def known_dim(self, d: int | None = None) -> int:
        """The input dimension: ``d`` when given, else the constructor's ``input_dim``.

        Raises
        ------
        ValueError
            Neither is known.
        """
        if d is not None:
            return check_int("d", d, ge=1)
        if self._input_dim is None:
            raise ValueError(
                "the input dimension d is not known; pass d=... (or input_dim= to the constructor)."
            )
        return self._input_dim

    def _noise_var(self, d: int | None) -> float:
        return self.sigma_for(self.known_dim(d)) ** 2

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
        *ranking*, however, that raw cosine does better (see
        :func:`privembed.search.projection.projection_search`).
        """
        ip = self.inner_product_estimate(y_i, y_j)
        floor = 1e-12
        ni = np.maximum(self.squared_norm_estimate(y_i, d=d), floor)
        nj = np.maximum(self.squared_norm_estimate(y_j, d=d), floor)
        return np.clip(ip / np.sqrt(ni * nj), -1.0, 1.0)


def require_projection(mechanism: Any, *, name: str = "mechanism") -> PrivateProjection:
    """Return ``mechanism`` if it is a :class:`PrivateProjection`, else raise ``TypeError``.

    For functions outside this package that only make sense for the projection's releases
    (:func:`privembed.search.projection.projection_search`): they refuse other mechanisms with a one-line
    message here rather than test the concrete class themselves.

    Examples
    --------
    >>> from privembed.mechanisms import LaplaceMechanism
    >>> require_projection(LaplaceMechanism(epsilon=5.0))
    Traceback (most recent call last):
    ...
    TypeError: mechanism must be a PrivateProjection, got mechanism=LaplaceMechanism(epsilon=5.0).
    """
    if not isinstance(mechanism, PrivateProjection):
        raise TypeError(f"{name} must be a PrivateProjection, got {name}={mechanism!r}.")
    return mechanism
