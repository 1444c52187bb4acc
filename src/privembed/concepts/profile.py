r"""Concept profiles: a learned mask saved with everything needed to trust and reuse it.

A profile is one ``.npz`` file (whatever its suffix, e.g. ``disease.profile``) holding

* ``mask`` -- (d,) float64 in [0, 1], the deterministic mask of eq. (2); the array
  :meth:`privembed.mechanisms.MahalanobisMechanism.from_profile` reads;
* ``log_alpha``, ``log_beta`` -- (d,) gate parameters (absent in combined profiles' sources that
  lacked them);
* ``sensitivity`` -- (d,) neuron sensitivity :math:`\Delta_i` ([T26] Def. 7), if computed;
* ``metadata`` -- a JSON string: format tag, concept definition(s), embedding model and
  dimension, :math:`\lambda` and the other training parameters, pair counts, probe validation
  accuracy with and without the mask, sparsity, the sensitivity diagnostic, seed, version.

The Mahalanobis mechanism turns the mask into :math:`\Sigma = \mathrm{diag}(m + \delta)`
normalised to trace d ([T26] Algorithm 1): the noise budget of the isotropic Laplace mechanism
at the same epsilon, moved onto the concept's dimensions.

**Combining concepts.** :meth:`ConceptProfile.combine` takes the element-wise maximum of the
masks (rule ``"max"``, the default): a dimension gets as much noise weight as the concept that
needs it most, so every concept keeps the protection its own profile would give it before
trace normalisation (which then spreads the fixed budget over more dimensions). Rule ``"mean"``
averages the masks instead (softer, and it dilutes a concept that only one profile carries).

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). Algorithm 1, §3.2.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_int
from ..mechanisms.mahalanobis import (
    DEFAULT_MASK_DELTA,
    MahalanobisMechanism,
    covariance_from_mask,
    smooth_covariance,
)
from ._npz import read_metadata, write_npz
from .cache import embed_texts
from .masks import MaskLearner, MaskResult
from .pairs import build_pairs
from .sensitivity import neuron_sensitivity, sensitivity_diagnostic
from .sources import Concept

__all__ = [
    "MIN_MASK_SPREAD",
    "PROFILE_FORMAT",
    "ConceptProfile",
    "learn_profile",
    "mask_spread",
    "uninformative_mask",
]

#: A learned mask is *uninformative* when its values span less than this (max - min). Every
#: gate starts at m = 0.5 (log alpha = 0, eq. 2), so a spread below 0.1 means no gate moved
#: more than 0.1 away from the others: with mask_delta = 1e-2 the covariance
#: diag(m + delta) then has largest/smallest ratio at most (0.55 + 0.01)/(0.45 + 0.01) = 1.22
#: around the identity after trace normalisation -- the Mahalanobis mechanism is the Laplace
#: mechanism with every axis rescaled by at most ~10%, whatever concept was named.
MIN_MASK_SPREAD = 0.1

#: format tag written into every profile's metadata
PROFILE_FORMAT = "privembed.concept-profile/1"
_ARRAYS = ("log_alpha", "log_beta", "sensitivity")


def _vector(name: str, value: Any, d: int | None) -> NDArray[np.float64] | None:
    if value is None:
        return None
    v = np.array(value, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or (d is not None and v.size != d):
        want = f"({d},)" if d is not None else "(d,)"
        raise DataError(f"{name} must have shape {want}, got {v.shape}.")
    if not np.isfinite(v).all():
        raise DataError(f"{name} has NaN or inf values.")
    return v


@dataclass
class ConceptProfile:
    """A concept mask and its provenance.

    Parameters
    ----------
    mask : array_like, shape (d,)
        Values in [0, 1].
    log_alpha, log_beta, sensitivity : array_like, shape (d,), optional
    metadata : dict

    Examples
    --------
    >>> p = ConceptProfile(mask=[1.0, 0.0, 0.5, 0.0], metadata={"concept": {"name": "toy"}})
    >>> p.sparsity, p.n_selected, p.top_dimensions(2)
    (0.5, 2, [(0, 1.0), (2, 0.5)])
    >>> p.covariance(mask_delta=0.0).tolist()   # trace-normalised to d = 4
    [2.6666666666666665, 0.0, 1.3333333333333333, 0.0]
    """

    mask: Any
    log_alpha: Any = None
    log_beta: Any = None
    sensitivity: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: a LEACE :class:`~privembed.concepts.erasure.ConceptEraser` fitted on the same pairs
    #: (``learn_profile(fit_eraser=True)``); :meth:`save` writes it beside the profile
    eraser: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = _vector("mask", self.mask, None)
        assert m is not None
        if (m < 0).any() or (m > 1).any():
            raise DataError("mask values must be in [0, 1].")
        self.mask = m
        d = m.size
        for name in _ARRAYS:
            setattr(self, name, _vector(name, getattr(self, name), d))
        if not isinstance(self.metadata, dict):
            raise TypeError(f"metadata must be a dict, got metadata={self.metadata!r}.")
        self.metadata = dict(self.metadata)

    # -- views ----------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        return int(self.mask.size)

    @property
    def sparsity(self) -> float:
        """Fraction of dimensions with mask exactly 0."""
        return float(np.mean(self.mask == 0))

    @property
    def n_selected(self) -> int:
        """Dimensions with mask > 0."""
        return int(np.count_nonzero(self.mask > 0))

    @property
    def concept_names(self) -> list[str]:
        """Name(s) of the concept(s) this profile protects."""
        concepts = self.metadata.get("concepts")
        if concepts is None and "concept" in self.metadata:
            concepts = [self.metadata["concept"]]
        return [str(c.get("name", "?")) for c in concepts or []]

    @property
    def concept(self) -> Concept | None:
        """The concept definition (None for combined or definition-less profiles)."""
        c = self.metadata.get("concept")
        try:
            return Concept.from_dict(c) if isinstance(c, dict) else None
        except (KeyError, TypeError, ValueError):
            return None

    def top_dimensions(self, k: int = 10) -> list[tuple[int, float]]:
        """The ``k`` dimensions with the largest mask values (ties: larger ``log_alpha`` first)."""
        k = check_int("k", k, ge=1)
        tie = self.log_alpha if self.log_alpha is not None else np.zeros(self.dim)
        order = np.lexsort((np.arange(self.dim), -tie, -self.mask))
        return [(int(i), float(self.mask[i])) for i in order[:k]]

    def covariance(
        self, *, mask_delta: float | None = None, smoothing: float = 0.0
    ) -> NDArray[np.float64]:
        r"""Diagonal of :math:`\Sigma = \mathrm{diag}(m + \delta)` normalised to trace d, optionally
        smoothed (:math:`\lambda I + (1 - \lambda)\Sigma`, renormalised) -- the Sigma that
        :class:`~privembed.mechanisms.MahalanobisMechanism` uses for this profile.
        """
        delta = DEFAULT_MASK_DELTA if mask_delta is None else mask_delta
        S = covariance_from_mask(self.mask, delta)
        return smooth_covariance(S, smoothing) if smoothing > 0 else S

    def mechanism(self, *, epsilon: float, **kwargs: Any) -> MahalanobisMechanism:
        """A :class:`~privembed.mechanisms.MahalanobisMechanism` with this mask."""
        return MahalanobisMechanism(epsilon=epsilon, mask=self.mask, **kwargs)

    def summary(self) -> dict[str, Any]:
        """What ``privembed concept show`` prints."""
        md = self.metadata
        probe = md.get("probe", {})
        return {
            "concepts": self.concept_names,
            "embedding_model": md.get("embedding_model"),
            "dim": self.dim,
            "sparsity": self.sparsity,
            "n_selected": self.n_selected,
            "mask_mean": float(self.mask.mean()),
            "lambda": md.get("training", {}).get("lam"),
            "n_pairs": md.get("pairs", {}).get("n_pairs"),
            "val_accuracy_masked": probe.get("val_accuracy_masked"),
            "val_accuracy_unmasked": probe.get("val_accuracy_unmasked"),
            "top_dimensions": self.top_dimensions(min(10, self.dim)),
            "sensitivity_diagnostic": md.get("sensitivity_diagnostic"),
            "combined": md.get("combine"),
        }

    # -- files ----------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the profile atomically (an ``.npz`` archive under any file name), and its
        eraser, if it has one, beside it (:func:`~privembed.concepts.erasure.eraser_path`)."""
        p = Path(path)
        if self.eraser is not None:
            from .erasure import eraser_path

            self.eraser.save(eraser_path(p))
        meta = {"format": PROFILE_FORMAT, **self.metadata, "dim": self.dim}
        arrays = {"mask": self.mask, **{name: getattr(self, name) for name in _ARRAYS}}
        return write_npz(p, meta, arrays)

    @classmethod
    def load(cls, path: str | Path) -> ConceptProfile:
        """Read a profile written by :meth:`save` (or any ``.npz`` with a ``mask`` array)."""
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"profile not found: {p}")
        if p.is_dir():
            raise IsADirectoryError(f"expected a profile file, got a directory: {p}")
        try:
            obj = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read profile {p}: {str(exc).splitlines()[0]}") from None
        if not isinstance(obj, np.lib.npyio.NpzFile):
            raise DataError(f"{p} is not a concept profile (not an .npz archive).")
        with obj as z:
            if "mask" not in z.files:
                raise DataError(f"{p} has no 'mask' array: not a concept profile.")
            try:
                arrays = {k: z[k] for k in ("mask", *_ARRAYS) if k in z.files}
                meta = read_metadata(z)
            except (OSError, ValueError) as exc:
                raise DataError(f"cannot read profile {p}: {str(exc).splitlines()[0]}") from None
        if not isinstance(meta, dict):
            raise DataError(f"{p}: metadata is not a JSON object.")
        fmt = meta.get("format", PROFILE_FORMAT)
        if not str(fmt).startswith("privembed.concept-profile/"):
            raise DataError(f"{p}: unknown profile format {fmt!r}.")
        meta.pop("dim", None)
        return cls(**arrays, metadata=meta)

    # -- several concepts -----------------------------------------------------------------

    @classmethod
    def combine(cls, profiles: Sequence[ConceptProfile], *, rule: str = "max") -> ConceptProfile:
        """One profile protecting several concepts (see the module notes for the rules).

        Examples
        --------
        >>> a = ConceptProfile(mask=[1.0, 0.0, 0.2], metadata={"concept": {"name": "a"}})
        >>> b = ConceptProfile(mask=[0.0, 0.5, 0.4], metadata={"concept": {"name": "b"}})
        >>> c = ConceptProfile.combine([a, b])
        >>> c.mask.tolist(), c.concept_names
        ([1.0, 0.5, 0.4], ['a', 'b'])
        """
        rule = check_choice("rule", rule, ("max", "mean"))
        profiles = list(profiles)
        if len(profiles) < 1:
            raise ValueError("combine needs at least one profile.")
        dims = {p.dim for p in profiles}
        if len(dims) != 1:
            raise DataError(f"profiles have different dimensions {sorted(dims)}: cannot combine.")
        models = {p.metadata.get("embedding_model") for p in profiles} - {None}
        if len(models) > 1:
            raise DataError(
                f"profiles come from different embedding models {sorted(map(str, models))}: "
                "their dimensions do not correspond."
            )
        reduce = np.max if rule == "max" else np.mean
        mask = reduce(np.stack([p.mask for p in profiles]), axis=0)

        def stacked(name: str) -> NDArray[np.float64] | None:
            vals = [getattr(p, name) for p in profiles]
            if any(v is None for v in vals):
                return None
            return reduce(np.stack(vals), axis=0)

        concepts: list[Any] = []
        for p in profiles:
            concepts.extend(
                p.metadata.get("concepts")
                or ([p.metadata["concept"]] if "concept" in p.metadata else [{"name": "?"}])
            )
        meta = {
            "concepts": concepts,
            "embedding_model": next(iter(models), None),
            "combine": {
                "rule": rule,
                "sources": [
                    {
                        "concepts": p.concept_names,
                        "sparsity": p.sparsity,
                        "probe": p.metadata.get("probe"),
                        "training": p.metadata.get("training"),
                    }
                    for p in profiles
                ],
            },
            "created": _now(),
        }
        return cls(
            mask=mask,
            log_alpha=stacked("log_alpha"),
            log_beta=stacked("log_beta"),
            sensitivity=stacked("sensitivity"),
            metadata=meta,
        )

    @classmethod
    def from_result(
        cls,
        result: MaskResult,
        *,
        concept: Concept | None = None,
        embedding_metadata: dict[str, Any] | None = None,
        pairs_summary: dict[str, Any] | None = None,
        sensitivity: Any = None,
        diagnostic: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> ConceptProfile:
        """Package a :class:`MaskResult` with its provenance."""
        from .. import __version__

        emb = dict(embedding_metadata or {})
        meta: dict[str, Any] = {
            "concept": concept.to_dict() if concept is not None else None,
            "embedding_model": emb.get("embedding_model"),
            "normalized": emb.get("normalized"),
            "training": result.params,
            "pairs": pairs_summary or {},
            "n_train_pairs": result.n_train_pairs,
            "n_val_pairs": result.n_val_pairs,
            "probe": {
                "val_accuracy_masked": result.val_accuracy_masked,
                "val_accuracy_unmasked": result.val_accuracy_unmasked,
                "train_accuracy_masked": result.train_accuracy_masked,
            },
            "sparsity": result.sparsity,
            "n_selected": int(result.selected.size),
            "epochs_run": result.epochs_run,
            "best_epoch": result.best_epoch,
            "stopped_early": result.stopped_early,
            "train_seconds": result.seconds,
            "final_epoch": result.history[-1] if result.history else None,
            "sensitivity_diagnostic": diagnostic,
            "seed": seed,
            "privembed_version": __version__,
            "created": _now(),
        }
        if concept is None:
            meta.pop("concept")
        return cls(
            mask=result.mask,
            log_alpha=result.log_alpha,
            log_beta=result.log_beta,
            sensitivity=sensitivity,
            metadata=meta,
        )


def mask_spread(mask: Any) -> dict[str, float]:
    """Numbers that say whether a mask learned anything: its range, mean, closed/open counts
    and the largest/smallest ratio of the covariance it gives (``mask_delta`` default).

    Examples
    --------
    >>> mask_spread([0.5, 0.52, 0.49])["spread"]
    0.030000000000000027
    """
    m = np.asarray(mask, dtype=np.float64).ravel()
    cov = covariance_from_mask(m, DEFAULT_MASK_DELTA)
    return {
        "min": float(m.min()),
        "max": float(m.max()),
        "mean": float(m.mean()),
        "spread": float(m.max() - m.min()),
        "n_closed": int(np.count_nonzero(m == 0)),
        "n_open": int(np.count_nonzero(m == 1)),
        "covariance_ratio": float(cov.max() / cov.min()) if cov.min() > 0 else float("inf"),
    }


def uninformative_mask(profile: ConceptProfile) -> str | None:
    """Why a learned profile's mask is uninformative (near-uniform), with what to try; None if
    its values span at least :data:`MIN_MASK_SPREAD`.

    Examples
    --------
    >>> print(uninformative_mask(ConceptProfile(mask=[0.5, 0.51, 0.5, 0.49])))  # doctest: +ELLIPSIS
    the learned mask is uninformative: its values span 0.49-0.51 (spread 0.02 < 0.1; mean 0.50, ...
    >>> uninformative_mask(ConceptProfile(mask=[1.0, 0.0, 0.5, 0.0])) is None
    True
    """
    s = mask_spread(profile.mask)
    if s["spread"] >= MIN_MASK_SPREAD:
        return None
    md = profile.metadata
    tr = md.get("training", {})
    probe = md.get("probe", {})
    pairs = md.get("pairs", {}).get("n_pairs", md.get("n_train_pairs"))
    acc = probe.get("val_accuracy_masked")
    acc_u = probe.get("val_accuracy_unmasked")
    probe_txt = ""
    if acc is not None:
        probe_txt = f"; probe accuracy {acc:.2f} with the mask" + (
            f", {acc_u:.2f} without" if acc_u is not None else ""
        )
    return (
        f"the learned mask is uninformative: its values span {s['min']:.2f}-{s['max']:.2f} "
        f"(spread {s['spread']:.2f} < {MIN_MASK_SPREAD:g}; mean {s['mean']:.2f}, "
        f"{s['n_closed']} of {profile.dim} gates closed, {s['n_open']} open), so the Mahalanobis "
        f"covariance is within {100 * (s['covariance_ratio'] - 1):.0f}% of the identity: it would "
        f"protect no concept more than the Laplace mechanism does. Trained on {pairs} pairs, "
        f"{tr.get('epochs')} epochs at lr {tr.get('lr')}{probe_txt}. Try more pairs (more "
        "--texts, or --n for a built-in concept), a higher learning rate (--lr 1e-2) or more "
        "--epochs; --force writes the profile anyway."
    )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def learn_profile(
    texts: Sequence[str],
    concept: Concept,
    *,
    embedder: Any = None,
    model: str | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    nlp: Any = None,
    rng: Any = None,
    learner: MaskLearner | None = None,
    fit_eraser: bool = False,
    **mask_params: Any,
) -> ConceptProfile:
    """The whole pipeline: pairs from ``texts``, cached embeddings, mask learning, sensitivity.

    Parameters
    ----------
    texts : sequence of str
        Sentences, some containing the concept (the others are counted and skipped).
    concept : Concept
    embedder, model, cache_dir, use_cache
        See :func:`~privembed.concepts.cache.embed_texts`.
    nlp : spaCy Language, optional
        For entity-label concepts (default: the offline English model).
    rng : int, numpy.random.Generator or None
    learner : MaskLearner, optional
        A configured learner (or give its parameters as ``**mask_params``).
    fit_eraser : bool, default False
        Also fit a LEACE eraser on the same pairs (D+ = 1, D- = 0; needs ``concept-erasure``),
        kept as :attr:`ConceptProfile.eraser`.
    **mask_params
        :class:`~privembed.concepts.masks.MaskLearner` parameters (``epochs``, ``lam`` ...).

    Raises
    ------
    DataError
        Fewer than 2 pairs could be built.
    """
    if learner is not None and mask_params:
        raise TypeError("give a learner or mask parameters, not both.")
    learner = learner if learner is not None else MaskLearner(**mask_params)
    pairs = build_pairs(texts, concept, nlp=nlp)
    if len(pairs) < 2:
        raise DataError(
            f"only {len(pairs)} of {pairs.n_texts} texts contain the concept {concept.name!r} "
            f"({pairs.n_without_concept} without it, {pairs.n_empty_after_removal} empty after "
            "removal); at least 2 are needed."
        )
    if embedder is None:
        from ..data.embedders import Embedder

        embedder = Embedder(model)
    X = embed_texts(
        [*pairs.positives, *pairs.negatives],
        embedder=embedder,
        cache_dir=cache_dir,
        use_cache=use_cache,
    )
    n = len(pairs)
    Xp, Xn = X[:n], X[n:]
    seed = int(rng) if isinstance(rng, int | np.integer) and not isinstance(rng, bool) else None
    result = learner.fit(Xp, Xn, rng=rng)
    sens = neuron_sensitivity(Xp, Xn)
    held = result.val_index if result.val_index.size >= 10 else np.arange(n)
    diag = sensitivity_diagnostic(Xp[held], Xn[held], result.log_alpha).to_dict()
    diag["pairs_used"] = "held-out" if result.val_index.size >= 10 else "all"
    profile = ConceptProfile.from_result(
        result,
        concept=concept,
        embedding_metadata=embedder.metadata(),
        pairs_summary=pairs.summary(),
        sensitivity=sens,
        diagnostic=diag,
        seed=seed,
    )
    if fit_eraser:
        from .erasure import ConceptEraser

        emb = embedder.metadata()
        profile.eraser = ConceptEraser.from_pairs(
            Xp,
            Xn,
            metadata={
                "concept": concept.name,
                "embedding_model": emb.get("embedding_model") or emb.get("model_id"),
            },
        )
    return profile
