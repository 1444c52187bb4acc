r"""How many candidates to fetch by protected similarity so that exact re-ranking finds the top k.

Private retrieval fetches the k' nearest *protected* vectors and re-ranks them with exact
vectors inside the trust boundary (DESIGN.md, "Private retrieval"; the query-side pattern is
RemoteRAG, [CH24]). This module computes k' from the mechanism's noise law and the corpus' own
similarity distribution, for a target recall of the true top k.

Model
-----
All vectors are unit vectors and similarity is the cosine. For a mechanism ``M`` and a unit
input ``x`` write the protected vector as

.. math::
    y = c\,x + \sqrt{1 - c^2}\,v, \qquad c = \cos(x, M(x)),\; v \perp x,\ \|v\| = 1.

For every isotropic mechanism (multivariate Laplace: noise radius Gamma(d, 1/epsilon) times a
uniform direction; Gaussian: radius sigma * chi_d; Purkayastha: angle theta with density
:math:`\propto e^{-\varepsilon\theta}\sin^{d-2}\theta`) the tangent direction ``v`` is uniform on
the sphere of directions orthogonal to ``x`` and independent of ``c``, so a mechanism enters only
through the law of ``c`` (:func:`cosine_law`: for radial noise ``R U``,
:math:`c = (1 + Ra)/\sqrt{1 + 2Ra + R^2}` with ``a`` a coordinate of ``U``; for Purkayastha
:math:`c = \cos\theta`). Other mechanisms are sampled through ``privatize`` (their tangent
direction is then only approximately uniform).

*Documents protected, clean query* ``q``. With clean score :math:`s = q \cdot x` and ``e`` the
unit part of ``q`` orthogonal to ``x``, the protected score is

.. math::
    t = q \cdot y = c\,s + \sqrt{1-c^2}\sqrt{1-s^2}\;\xi, \qquad \xi = v \cdot e,

where :math:`\xi` is a coordinate of a uniform point on :math:`S^{d-2}` (mean 0, variance
1/(d-1); taken as normal here, which is accurate for d in the tens and above). Documents get
independent noise, so given the clean scores the protected scores are independent.

*Protected query, clean documents* (RemoteRAG). Now the query's noise is shared by all
documents: with :math:`\alpha = \cos(q, \tilde q)` and :math:`w_i` the unit part of document
``i`` orthogonal to ``q``,

.. math::
    \tilde t_i = \alpha s_i + \sqrt{1-\alpha^2}\sqrt{1-s_i^2}\;\zeta_i, \qquad
    \zeta_i = \tilde v \cdot w_i ,

and the :math:`\zeta_i` are correlated through the documents' geometry. The model takes the
residual directions as equicorrelated with the corpus' mean residual cosine :math:`\rho`
(:attr:`ScoreProfile.rho`): :math:`\zeta_i = (\sqrt\rho Z_0 + \sqrt{1-\rho} Z_i)/\sqrt{d-1}`,
:math:`Z` standard normal, :math:`Z_0` shared. Given :math:`(\alpha, Z_0)`, which are drawn from
their laws, the scores are again independent.

*Both sides*: the query-side score :math:`\tilde s_i` takes the place of ``s`` in the
document-side law (a normal mixture in ``c``).

*Rank of a true top-k document.* Given the shared factors, document ``j`` of the true top k with
protected score :math:`t_j` is fetched at depth k' when fewer than k' of the other N - 1
documents score above it. That count is a sum of independent Bernoulli variables with
probabilities :math:`P(t_i > t_j \mid s_i)`; its mean and variance come from the histogram of
the corpus' clean scores for the query (:class:`ScoreProfile`), and the probability is taken from
the normal approximation with continuity correction. The predicted recall at depth k' is the
average over the profile's sample queries, the shared factors, the top-k documents and draws of
their own noise; :func:`rerank_depth` returns the smallest k' that reaches the target.

The sample queries stand in for future queries: build the profile from queries (or documents
used as queries) that are not the ones you will measure on.

This module is the public face of k' theory, written in one module each by what it does:
:mod:`~privembed.search.rerank_law` (the law of the cosine),
:mod:`~privembed.search.rerank_profile` (:class:`ScoreProfile`) and
:mod:`~privembed.search.rerank_model` (the rank model, :func:`rerank_depth`,
:class:`RerankPlanner`); here are pseudo-queries, the batch size of a search in bounded memory,
and the measured ranks and recall that a prediction is checked against.

References
----------
.. [CH24] Cheng, Y. et al. (2024). RemoteRAG: a privacy-preserving LLM cloud RAG service.
   arXiv:2412.12775.
.. [A26] Asghar, Zhao, Carpentier, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs. (The noisy dot product distribution.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_real
from ..core.rng import as_generator
from .rerank_law import cosine_law, subspace_profile_needed
from .rerank_model import RerankPlanner, best_subspace_dimension, predicted_recall, rerank_depth
from .rerank_profile import DEFAULT_BINS as DEFAULT_BINS
from .rerank_profile import ScoreProfile, document_rows

__all__ = [
    "RerankPlanner",
    "ScoreProfile",
    "best_subspace_dimension",
    "candidate_bytes",
    "cosine_law",
    "document_rows",
    "predicted_recall",
    "protected_ranks",
    "pseudo_queries",
    "query_batch_size",
    "recall_at_depths",
    "rerank_depth",
    "subspace_profile_needed",
]

#: relative size of the isotropic noise that turns documents into pseudo-queries
#: (:func:`pseudo_queries`); calibrated on GCIDE dev queries (docs/retrieval.md)
PSEUDO_QUERY_DILUTION = 0.75
#: the further dilution of pseudo-queries inside a subspace (:meth:`ScoreProfile.from_subspace`);
#: calibrated on GCIDE dev queries likewise
SUBSPACE_PSEUDO_QUERY_DILUTION = 0.5


def pseudo_queries(
    documents: Any, *, dilution: float = PSEUDO_QUERY_DILUTION, rng: Any = None
) -> Any:
    r"""Documents made to look like queries for a k' profile, when no real queries are at hand.

    A document used as a query is closer to its neighbours than a real query is (its near
    duplicates and sister senses stand out from the bulk), so a profile built from documents
    under-fetches: on GCIDE it reached recall 0.80 at a target of 0.90 and 0.885 at 0.95. A
    pseudo-query is the document diluted with isotropic noise,
    :math:`\tilde q = (x + \beta g/\sqrt d)/\|\cdot\|`, :math:`g \sim \mathcal N(0, I_d)`:
    every similarity shrinks towards the bulk and the bulk spreads, as for a real query that
    shares only part of its best match. The default beta = 0.75 was calibrated on GCIDE *dev*
    queries (the diluted documents' mean top-1 cosine then matches the queries'); it is a
    property of that task, not a law -- real queries (``profile_queries``) remain better.
    Profiles built from pseudo-queries exclude each one's source document.
    """
    D, _ = check_embeddings(documents, name="documents")
    beta = check_real("dilution", dilution, ge=0)
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    D = D / np.linalg.norm(D, axis=1, keepdims=True)
    G = as_generator(rng).standard_normal(D.shape) / math.sqrt(D.shape[1])
    out = D + beta * G
    return out / np.linalg.norm(out, axis=1, keepdims=True)


#: memory the candidates of one batch of queries may hold during a search (160 MiB): with
#: exact re-rank, k' candidates per query are fetched, their payloads opened and scored
SEARCH_BATCH_BYTES = 160 << 20
#: most queries in one batch (plain search: the treated queries and the store's answers)
MAX_QUERY_BATCH = 1024


# ---------------------------------------------------------------------------------------------
# searching in bounded memory
# ---------------------------------------------------------------------------------------------


def candidate_bytes(dim: int, *, payload_itemsize: int = 4) -> int:
    """Memory one fetched candidate holds while its batch is re-ranked, in bytes.

    Its sealed payload (``payload_itemsize * dim + 45`` bytes, :mod:`privembed.keys.payload`), its
    plaintext (kept until the batch's texts are read) and its vector's bytes gathered for the
    batch (``payload_itemsize * dim`` each), the opened vector as a float32 row and as a
    float64 row for the exact cosine, and about 1.5 KiB of Python objects (the hit, its
    metadata, the bookkeeping of the batch): an upper bound -- ``privembed search`` over a
    FAISS store of 117,659 records at k' = 1,000 grew by 4.3 MiB per query of a batch when
    payloads were opened one at a time (candidates shared by queries of a batch are opened
    once). Stored texts come on top.

    Examples
    --------
    >>> candidate_bytes(384)
    10797
    """
    dim = check_int("dim", dim, ge=1)
    itemsize = check_int("payload_itemsize", payload_itemsize, ge=1)
    return 3 * itemsize * dim + 45 + (4 + 8) * dim + 1536


def query_batch_size(
    depth: int,
    dim: int,
    *,
    budget_bytes: int = SEARCH_BATCH_BYTES,
    payload_itemsize: int = 4,
    max_batch: int = MAX_QUERY_BATCH,
) -> int:
    """Queries to search together so that their ``depth`` candidates each stay within
    ``budget_bytes`` (at least one query, at most ``max_batch``).

    A search holds the candidates of one batch at a time, so its peak memory follows k'
    (``depth``) and the dimension, never the number of queries.

    Examples
    --------
    >>> query_batch_size(1000, 384), query_batch_size(10_000, 384), query_batch_size(31_035, 384)
    (15, 1, 1)
    >>> query_batch_size(10, 384)   # plain search: capped
    1024
    """
    depth = check_int("depth", depth, ge=1)
    budget = check_int("budget_bytes", budget_bytes, ge=1)
    cap = check_int("max_batch", max_batch, ge=1)
    per_query = depth * candidate_bytes(dim, payload_itemsize=payload_itemsize)
    return max(1, min(cap, budget // per_query))


# ---------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------


def protected_ranks(clean: Any, protected: Any, *, k: int = 10) -> NDArray[np.int64]:
    """Rank (1-based) by protected score of each query's true top-``k`` documents.

    Parameters
    ----------
    clean, protected : array_like, shape (n_queries, n_docs)
        Clean and protected similarity of every query to every document (a block of queries).

    Returns
    -------
    ndarray of int64, shape (n_queries, k)
        Rank among the protected scores (ties count against the document: pessimistic).
        Document j of the true top k is among the top k' fetched when its rank is <= k'.

    Examples
    --------
    >>> protected_ranks([[0.9, 0.5, 0.1]], [[0.2, 0.6, 0.1]], k=2).tolist()
    [[2, 1]]
    """
    C = np.asarray(clean, dtype=np.float64)
    P = np.asarray(protected, dtype=np.float64)
    if C.ndim != 2 or C.shape != P.shape:
        raise DataError(
            f"clean and protected must be 2-D of one shape, got {C.shape} and {P.shape}."
        )
    k = min(check_int("k", k, ge=1), C.shape[1])
    top = np.argpartition(-C, k - 1, axis=1)[:, :k]
    own = np.take_along_axis(P, top, axis=1)  # (nq, k)
    n = P.shape[1]
    ranks = np.empty(own.shape, dtype=np.int64)
    for r in range(P.shape[0]):  # documents scoring >= each own score, itself included
        ranks[r] = n - np.searchsorted(np.sort(P[r]), own[r], side="left")
    return ranks


def recall_at_depths(ranks: Any, depths: Sequence[int] | int) -> NDArray[np.float64]:
    """Mean share of the true top k within the first k' fetched, for each depth k'.

    Examples
    --------
    >>> recall_at_depths([[1, 5], [2, 3]], [2, 5]).tolist()
    [0.5, 1.0]
    """
    R = np.asarray(ranks)
    return np.array(
        [float((R <= check_int("depth", int(x), ge=1)).mean()) for x in np.atleast_1d(depths)]
    )
