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

Protected queries. A query that must not leave in the clear either (RemoteRAG) is protected by
:func:`protect_queries` (``ProtectedCollection.query(..., protect_query=mechanism)``) with
*keyed* noise: a function of (the collection's key, the query mechanism's configuration, the
embedding model, the clean query's content), under a key of its own (``HMAC(K,
"privembed/query/v1")``), so a repeated query gets the identical vector -- averaging copies
gains nothing -- and a query never reproduces a document's release. Nothing records queries in
a ledger: repeats are free by construction, and *different* queries (paraphrases) get
independent noise like any other content. Without a key, fresh noise that nothing records would
average away, so it is refused unless the caller passes an explicit seed (``rng``, experiments).

References
----------
.. [MC25] Mishra & Chandra (2025). Differential privacy in data reduction. Alg. 1, §5.2.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core import labels
from ..core._validation import check_embeddings, check_int
from ..keys.keyed import resolve_key, vector_digests
from ..mechanisms import MECHANISMS, Mechanism, build_mechanism
from ..release import Release

__all__ = ["METRICS", "QueryTreatment", "protect_queries", "query_key", "query_treatment"]

_QUERY_DOMAIN = labels.QUERY

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


def query_key(key: Any) -> bytes:
    """The noise key of protected queries, derived from the collection's key (so query noise is
    independent of every document's noise)."""
    return hmac.digest(resolve_key(key), _QUERY_DOMAIN, "sha256")


def protect_queries(
    mechanism: Mechanism,
    Q: Any,
    *,
    key: Any = None,
    rng: Any = None,
    model: str | None = None,
) -> NDArray[Any]:
    """Protect query embeddings before they leave the trust boundary (keyed noise).

    Parameters
    ----------
    mechanism : Mechanism
        The query mechanism.
    Q : array_like, shape (nq, d) or (d,)
        Clean query embeddings.
    key : bytes or path, optional
        The collection's secret key: the noise of a query is a function of (key, the
        mechanism's configuration, ``model``, the query's content), so a repeated query gets
        the same vector (see the module docstring).
    rng : int or numpy.random.Generator, optional
        Seeded noise instead (experiments only); not with ``key``.
    model : str, optional
        The embedding model (part of the keyed context).

    Returns
    -------
    ndarray
        The protected queries, the shape of ``Q``.

    Raises
    ------
    ValueError
        Neither a key nor a seed (fresh, unrecorded noise per query averages away), or both.

    Examples
    --------
    >>> from privembed import get_mechanism
    >>> m = get_mechanism("laplace", epsilon=20.0)
    >>> q = np.eye(4)[:2]
    >>> a = protect_queries(m, q, key=b"k" * 32)
    >>> bool(np.array_equal(a, protect_queries(m, q[::-1], key=b"k" * 32)[::-1]))
    True
    """
    if key is not None and rng is not None:
        raise ValueError(
            "protect_query takes a key or a seed, not both (keyed noise is deterministic)."
        )
    if key is None and rng is None:
        raise ValueError(
            "protect_query needs the collection's key (keyed query noise: a repeated query "
            "gets the same vector) or an explicit rng for experiments; fresh noise that "
            "nothing records would average away over repeated queries."
        )
    arr, single = check_embeddings(Q, name="query")
    if rng is not None:
        out = np.asarray(mechanism.privatize(arr, rng=rng))
        return out[0] if single else out
    digests = vector_digests(np.ascontiguousarray(arr, dtype=np.float32))
    first: dict[bytes, int] = {}  # digest -> its first row; equal queries share one release
    for i, dg in enumerate(digests):
        first.setdefault(dg, i)
    unique = list(first.values())
    slot = {dg: j for j, dg in enumerate(first)}
    where = [slot[dg] for dg in digests]
    ids = ["query:" + digests[i].hex() for i in unique]
    with Release(mechanism, key=query_key(key), model=model, name="query") as rel:
        Y = rel.protect(arr[unique], ids)
    out = Y[where]
    return out[0] if single else out


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
