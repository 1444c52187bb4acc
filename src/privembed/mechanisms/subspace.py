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

The pieces, one module each:

* :mod:`~privembed.mechanisms.subspace_basis` -- :class:`SubspaceBasis`, the pre-processing
  step :math:`x \mapsto P_k(x - \mu)` (its components, centre, spectrum and provenance) and its
  files. It is 1-Lipschitz in l2, which is the metric it preserves: any d_X guarantee stated
  after it holds before it. A basis either comes from **public text**
  (:meth:`SubspaceBasis.from_embeddings`, exact PCA: no privacy cost) or from the private
  corpus through **differentially private PCA**;
* :mod:`~privembed.mechanisms.dp_pca` -- :func:`dp_pca`, whose central (epsilon_p, delta_p)
  guarantee is charged once to every record it was computed from (:func:`charge_basis`, the
  ledger's public API);
* :mod:`~privembed.mechanisms.basis_fitting` -- :func:`basis_from` (the basis a command names)
  and :func:`fit_basis` (``privembed basis``: fitted once, written with its charge);
* this module -- :class:`SubspaceMechanism`, the basis composed with a noise law in k
  dimensions (``laplace``, ``gaussian`` or ``purkayastha``), on the
  :class:`~privembed.mechanisms.Mechanism` base (keyed noise, the ledger, blocks and threads
  for free), and :func:`subspace_dimension` (choosing k). It re-exports the basis modules'
  names, so ``privembed.mechanisms.subspace`` stays the one import for all of them.

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
.. [BW18] Balle & Wang (2018). Improving the Gaussian mechanism for differential privacy. ICML.
.. [A26] Asghar, Zhao, Carpentier, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs.
.. [D23] Du et al. (2023). Sanitizing sentence embeddings (and labels) for local differential
   privacy. WWW. (Purkayastha.)
"""

from __future__ import annotations

import math
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
from .base import Mechanism, canonical_params
from .basis_fitting import basis_from, fit_basis
from .dp_pca import (
    BasisCharge,
    NoisyMoments,
    SecondMoments,
    charge_basis,
    dp_pca,
    dp_pca_sensitivity,
)
from .gaussian import gaussian_guarantee
from .laplace import sample_l2_laplace
from .purkayastha import purkayastha_angle_table
from .subspace_basis import BASIS_FORMAT, SubspaceBasis, orthonormal_rows

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

NOISES = ("laplace", "gaussian", "purkayastha")


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
        rel = f"any two {dom} (l2 sensitivity of P(x - mean) is 2 ||P||_2 = 2)"
        law = f"Gaussian noise sigma={m.sigma:.4g} in k={m.k} dimensions; {basis_note}"
        return gaussian_guarantee(m, m.sigma / 2.0, rel, Neighbouring.RECORD, law)

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
        obj = SubspaceBasis(orthonormal_rows(basis, "basis"), mean)
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
