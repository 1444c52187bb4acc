"""A scikit-learn transformer that protects embeddings: ``PrivatizeTransformer``.

It drops into a :class:`sklearn.pipeline.Pipeline` in front of any estimator that consumes
embeddings (a classifier, clustering, nearest neighbours), so a model can be trained and
evaluated on exactly what would be released, and ``GridSearchCV`` can sweep ``epsilon``.

Randomness is scikit-learn's ``random_state`` (it takes what privembed's ``rng`` takes): an
int restarts the same stream on every :meth:`~PrivatizeTransformer.transform` (reproducible,
experiments only: two different datasets transformed with the same int get the same noise row
by row), a :class:`numpy.random.Generator` is advanced by each call, and ``None`` draws fresh
OS entropy every call. The earlier spelling ``rng=`` still works and warns (``FutureWarning``).
With a ``key`` the noise of each row is keyed by the SHA-256 of the row itself
(:mod:`privembed.keys.keyed`): identical rows always get identical releases (no averaging attack),
the result does not depend on batching or row order, and
:meth:`~PrivatizeTransformer.transform` is deterministic.
"""

from __future__ import annotations

import copy
import numbers
import os
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require

require("sklearn", "integrations", purpose="the scikit-learn transformer")

from sklearn.base import (  # noqa: E402 - after the extra check
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
)
from sklearn.utils.validation import check_is_fitted, validate_data  # noqa: E402

from ..mechanisms import Mechanism, build_mechanism  # noqa: E402
from ..release import Release, content_ids  # noqa: E402

__all__ = ["PrivatizeTransformer"]


class _KeyId:
    """Stands in for a key in reprs: ``<key id 0123456789abcdef>``."""

    def __init__(self, key: Any) -> None:
        from ..keys.keyed import key_id, resolve_key

        try:
            self.text = f"<key id {key_id(resolve_key(key))}>"
        except (TypeError, ValueError, OSError):
            self.text = "<invalid key>"

    def __repr__(self) -> str:
        return self.text


class PrivatizeTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Protect embeddings with a privembed mechanism inside a scikit-learn pipeline.

    Parameters
    ----------
    mechanism : str or Mechanism, default "gaussian"
        A registered mechanism name (:func:`privembed.mechanisms.build_mechanism`) or a mechanism instance.
    epsilon, delta : float, optional
        Passed to a named mechanism (``None``: not passed). Top-level so that
        ``GridSearchCV`` can sweep them.
    mechanism_params : dict, optional
        Other parameters of a named mechanism (e.g. ``{"k": 64}`` for ``"projection"``).
    key : bytes or path, optional
        Secret key, or the path of a key file (``privembed keygen``): keyed noise per row
        content (see the module docstring).
    random_state : int, numpy.random.Generator or None
        Randomness without a key; see the module docstring. Ignored with a ``key`` (keyed
        noise is deterministic), as scikit-learn's tools set it on every estimator.
    rng : int, numpy.random.Generator or None
        Deprecated spelling of ``random_state`` (warns).

    Attributes
    ----------
    mechanism_ : Mechanism
        The fitted mechanism (for a projection, ``P`` and sigma are built for
        ``n_features_in_``).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame with string column names.

    Notes
    -----
    ``fit`` learns nothing from the data (the mechanism is data-independent; privacy does not
    depend on the fitted data). Output rows follow the mechanism's conventions (unit length for
    renormalising mechanisms; ``mechanism.output_dim(d)`` columns).

    Examples
    --------
    >>> X = np.random.default_rng(0).standard_normal((5, 8))
    >>> t = PrivatizeTransformer("gaussian", epsilon=5.0, delta=1e-5, random_state=0)
    >>> Y = t.fit_transform(X)
    >>> Y.shape, bool(np.array_equal(Y, t.transform(X)))
    ((5, 8), True)
    >>> t.get_feature_names_out()[:2].tolist()
    ['privatizetransformer0', 'privatizetransformer1']
    """

    def __init__(
        self,
        mechanism: str | Mechanism = "gaussian",
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        mechanism_params: dict[str, Any] | None = None,
        key: bytes | str | os.PathLike[str] | None = None,
        random_state: Any = None,
        rng: Any = None,
    ) -> None:
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.delta = delta
        self.mechanism_params = mechanism_params
        self.key = key
        self.random_state = random_state
        self.rng = rng

    def _random_state(self) -> Any:
        """``random_state``, or the deprecated ``rng`` (with a FutureWarning)."""
        if self.rng is None:
            return self.random_state
        if self.random_state is not None:
            raise ValueError(
                "give random_state (rng is its deprecated spelling), not both, got "
                f"random_state={self.random_state!r} and rng={self.rng!r}."
            )
        warnings.warn(
            "PrivatizeTransformer(rng=...) is deprecated; use random_state=... (scikit-learn's "
            "name for the same thing).",
            FutureWarning,
            stacklevel=3,
        )
        return self.rng

    def _build(self) -> Mechanism:
        if isinstance(self.mechanism, Mechanism):
            if self.epsilon is not None or self.delta is not None or self.mechanism_params:
                raise ValueError(
                    "epsilon, delta and mechanism_params apply to a mechanism name; set them "
                    f"on the instance instead, got mechanism={self.mechanism!r}."
                )
            return self.mechanism
        if not isinstance(self.mechanism, str):
            raise TypeError(
                f"mechanism must be a mechanism name or a Mechanism, got "
                f"mechanism={self.mechanism!r}."
            )
        params = dict(self.mechanism_params or {})
        return build_mechanism(self.mechanism, epsilon=self.epsilon, delta=self.delta, **params)

    def fit(self, X: Any, y: Any = None) -> PrivatizeTransformer:
        """Validate ``X`` and build the mechanism for its dimension (``y`` is ignored)."""
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        state = self._random_state()
        if self.key is not None and self.rng is not None and state is not None:
            raise ValueError("give rng or key, not both (keyed noise is deterministic).")
        mech = self._build()
        mech.check_dim(X.shape[1])
        self.mechanism_ = mech
        self._n_features_out = mech.output_dim(X.shape[1])
        return self

    def transform(self, X: Any) -> NDArray[Any]:
        """Protected rows of ``X`` (n, d) -> (n, output_dim), dtype kept (float32/float64).

        Raises
        ------
        ValueError
            NaN/inf rows, all-zero rows (for mechanisms that normalise), wrong dimension.
        """
        check_is_fitted(self, "mechanism_")
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        if self.key is not None:
            with Release(self.mechanism_, key=self.key) as rel:
                return rel.protect(X, content_ids(key=rel.key, X=X))
        with warnings.catch_warnings():  # fit already warned about rng=
            warnings.simplefilter("ignore", FutureWarning)
            rng = self._random_state()
        if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
            rng = int(rng)  # restart the stream: scikit-learn's random_state convention
        with Release(self.mechanism_, rng=rng) as rel:
            return rel.protect(X)

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        """scikit-learn's repr, with the secret key shown only by its public key id."""
        if self.key is None:
            return super().__repr__(N_CHAR_MAX)
        shown = copy.copy(self)
        shown.key = _KeyId(self.key)  # type: ignore[assignment]
        return BaseEstimator.__repr__(shown, N_CHAR_MAX)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        state = self.random_state if self.rng is None else self.rng
        seeded = isinstance(state, numbers.Integral) and not isinstance(state, bool)
        tags.non_deterministic = self.key is None and not seeded
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.allow_nan = False
        return tags
