r"""The query side: what a plain query embedding needs before it meets a collection's releases.

Protected vectors are released once; queries are usually *not* protected (the querying party
holds its query in the clear). What a query needs depends on the mechanism that made the
collection:

* **No protection, or a noise mechanism** (Gaussian, empirical, Laplace, Mahalanobis,
  Purkayastha): nothing -- the plain embedding. Releases live in the input space.
* **PrivateProjection** ([MC25] Alg. 1): the same **public** projection and **no noise**,
  :math:`Pq` (:meth:`~privembed.mechanisms.PrivateProjection.project`); releases live in the
  projected space.

Index metric. Collections are searched by cosine for every mechanism. The inner product of a
clean query with a release is the unbiased estimate of :math:`\langle q, x\rangle` (of
:math:`\langle Pq, Px\rangle` for the projection, [MC25] §5.2), but for *ranking* the cosine is
at least as good in every case measured (``benchmarks/bench_integrations.py --ranking``: recall@10
against the clean neighbours, Gaussian, Laplace and projection, with and without
renormalisation): dividing by the release norm down-weights exactly the releases whose noise is
large, and for the projection also removes the JL distortion of :math:`\|Px\|`.

Scores. A cosine against a noisy release is shrunk towards 0. For mechanisms whose noise is
isotropic around the (unit) input -- Gaussian, empirical, Laplace, Purkayastha -- the expected
release *direction* is :math:`c\,x` with :math:`c = E[\cos(x, y)]` (the mechanism's
``expected_cosine(d)``; symmetry cancels every component orthogonal to :math:`x`), so

.. math:: \widehat{\cos}(q, x) = \cos(q, y) / c

is an unbiased estimate of the clean cosine for any unit query :math:`q`. For the projection,
:math:`c` is the Gaussian expected cosine at :math:`(\sigma, k)` and the estimate is unbiased for
:math:`\cos(Pq, Px) \approx \cos(q, x)` (exact up to the JL distortion). These are the scores
:class:`~privembed.integrations.collection.ProtectedCollection` returns: the ranking is the
store's, the values are on the scale of clean cosines, so a similarity threshold tuned on clean
data keeps its meaning. Mahalanobis noise is not isotropic and inputs that are not unit-normalised
have no single :math:`c`: their scores are the raw cosines (:attr:`QueryTreatment.calibrated` is
False).

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. Alg. 1, §5.2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import check_embeddings, check_int
from ..mechanisms import MECHANISMS, Mechanism, build_mechanism

__all__ = ["METRICS", "QueryTreatment", "query_treatment"]

#: similarities an index can be built for: cosine of the stored vectors, or raw inner product
METRICS = ("cosine", "ip")


@dataclass(frozen=True)
class QueryTreatment:
    """How to turn a plain query embedding into what is compared with a collection's releases.

    Attributes
    ----------
    kind : {"none", "projection"}
        ``"none"``: the plain embedding; ``"projection"``: the public projection, no noise.
    metric : {"cosine", "ip"}
        The similarity the index uses (always ``"cosine"`` for collections made here).
    description : str
        One line for humans (``privembed search`` prints it).
    mechanism : Mechanism or None
        The mechanism rebuilt from its configuration (``None`` if it cannot be rebuilt, e.g.
        Mahalanobis, whose covariance is stored only as a hash).
    calibrated : bool
        Whether :meth:`score_scale` turns cosines into unbiased estimates of clean cosines.
    """

    kind: str
    metric: str
    description: str
    mechanism: Mechanism | None = None
    calibrated: bool = False
    _scales: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    def apply(self, Q: Any) -> NDArray[np.float32]:
        """Treated queries, float32, shape (nq, d_out) (or (d_out,) for one vector).

        Raises
        ------
        privembed.DataError
            NaN/inf or all-zero queries.
        """
        arr, single = check_embeddings(Q, name="query")
        X = np.asarray(arr, dtype=np.float64)
        if self.kind == "projection":
            assert self.mechanism is not None
            out = np.asarray(self.mechanism.public_transform(X), dtype=np.float64)
        else:
            out = X / np.linalg.norm(X, axis=1, keepdims=True)
        res = out.astype(np.float32)
        return res[0] if single else res

    def score_scale(self, d: int) -> float:
        """Factor ``1 / E[cos(x, y)]`` that makes a cosine to a release an unbiased estimate of
        the clean cosine (1.0 when not :attr:`calibrated`); ``d`` is the input dimension."""
        d = check_int("d", d, ge=2)
        if not self.calibrated or self.mechanism is None:
            return 1.0
        s = self._scales.get(d)
        if s is None:
            got = self.mechanism.expected_cosine(d)
            c = 0.0 if got is None else float(got)
            s = 1.0 / c if c > 0 else 1.0
            self._scales[d] = s
        return s


def _rebuild(config: dict[str, Any]) -> Mechanism | None:
    """The mechanism a stored configuration describes, or None if it cannot be rebuilt
    (e.g. a full covariance stored only by its digest)."""
    if str(config.get("mechanism")) not in MECHANISMS:
        return None
    try:
        return build_mechanism(**config)
    except (TypeError, ValueError, OSError):
        return None


def query_treatment(mechanism: Mechanism | dict[str, Any] | None) -> QueryTreatment:
    """The query-side treatment a collection protected by ``mechanism`` requires.

    Parameters
    ----------
    mechanism : Mechanism, dict or None
        The mechanism, its :attr:`~privembed.Mechanism.config` (as stored in file or collection
        metadata), or ``None`` for unprotected vectors.

    Returns
    -------
    QueryTreatment

    Raises
    ------
    ValueError
        A projection configuration that cannot be rebuilt (queries need its ``P``).

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> t = query_treatment(get_mechanism("gaussian", epsilon=5.0, delta=1e-5))
    >>> t.kind, t.metric, t.calibrated
    ('none', 'cosine', True)
    >>> m = get_mechanism("projection", k=8, epsilon=5.0, delta=1e-5)
    >>> t = query_treatment(m.config)          # rebuilt from stored metadata
    >>> t.kind, t.apply(np.ones(32)).shape
    ('projection', (8,))
    """
    if mechanism is None:
        return QueryTreatment("none", "cosine", "unprotected: the plain query, cosine")
    if isinstance(mechanism, Mechanism):
        config = mechanism.config
        mech: Mechanism | None = mechanism
    elif isinstance(mechanism, dict):
        if "mechanism" not in mechanism:
            raise ValueError("a mechanism configuration needs a 'mechanism' entry.")
        config = mechanism
        mech = _rebuild(config)
    else:
        raise TypeError(
            f"mechanism must be a Mechanism, a configuration dict or None, got {mechanism!r}."
        )
    name = str(config["mechanism"])
    unit = config.get("input_norm", "normalize") == "normalize"
    cls = MECHANISMS.get(name)
    if cls is not None and cls.has_public_transform:
        if mech is None:
            raise ValueError(
                f"cannot rebuild the projection from its configuration {config!r}; queries "
                "need the same public projection."
            )
        calibrated = unit  # renormalising does not change a cosine
        return QueryTreatment(
            "projection",
            "cosine",
            "the same public projection P q, no noise; cosine"
            + ("; scores / E[cos] (unbiased for cos(Pq, Px))" if calibrated else ""),
            mech,
            calibrated,
        )
    calibrated = unit and mech is not None and mech.expected_cosine(2) is not None
    return QueryTreatment(
        "none",
        "cosine",
        f"{name}: the plain query, cosine"
        + ("; scores / E[cos] (unbiased for the clean cosine)" if calibrated else ""),
        mech,
        calibrated,
    )
