"""Re-identification (linkage): which original does a protected vector come from?

The attacker holds a pool of candidate original embeddings that contains the sources (a leaked
index, a public corpus) and links every protected vector to its most similar candidates by
cosine. The top-1 rate is *the same number* that [K26] reports as "top-1 retrieval accuracy"
utility (:func:`privembed.evaluation.metrics.self_retrieval`), read from the attacker's side:
what makes protected vectors useful for search is what makes them linkable. Ranks are exact
(ties count against the attacker, as :func:`privembed.evaluation.metrics.retrieval_ranks`
counts them), so both numbers agree; they are computed a block of candidates at a time
(memory does not grow with protected vectors x candidates).

References
----------
.. [K26] Kaliutau (2026). Privacy-utility trade-off analysis for 1920-dimensional clinical
   vectors. Top-1 retrieval accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int
from ..mechanisms.base import unit_rows
from ._common import embeddings_f64
from .base import AttackResult

__all__ = ["BLOCK", "LinkageAttack", "LinkageReport", "linkage_ranks", "rate_interval"]


#: rows of the protected vectors and of the candidates scored at once by :func:`linkage_ranks`
#: (a float64 block of scores is ``BLOCK`` x ``BLOCK``: 128 MiB)
BLOCK = 4096


def linkage_ranks(
    protected: Any, candidates: Any, targets: Any = None, *, block: int = BLOCK
) -> NDArray[np.int64]:
    r"""Rank (0 = linked correctly) of each protected vector's source among all candidates.

    Parameters
    ----------
    protected : array_like, shape (n, d)
    candidates : array_like, shape (m, d), m >= n
        The attacker's pool of original embeddings.
    targets : sequence of int, length n, optional
        Row of ``candidates`` that is the source of each protected vector (default: row i for
        vector i, i.e. the first n candidates).
    block : int, default :data:`BLOCK`
        Protected vectors and candidates scored at once: memory is O((n + m) d + block^2),
        never an n x m matrix of scores; the ranks do not depend on it.

    Notes
    -----
    The rank of protected vector i is the number of candidates other than its source j whose
    cosine to it is at least its source's, :math:`\#\{l \ne j : s_{il} \ge s_{ij}\}`: ties count
    against the attacker (as in :func:`~privembed.search.geometry.retrieval_ranks`), a copy of
    the source elsewhere in the pool ties with it, and protected vectors that share a source
    are ranked independently. Cosines are taken in float64 between unit rows, a block of
    candidates at a time; the source's own score comes from the same kind of product (a
    block of protected vectors against their sources), so that an exact copy of the source
    ties with it.

    Examples
    --------
    >>> pool = np.eye(4)
    >>> linkage_ranks([[0.1, 1.0, 0.0, 0.0], [0.0, 0.0, 0.5, 1.0]], pool, targets=[1, 2]).tolist()
    [0, 1]
    """
    block = check_int("block", block, ge=1)
    Q = embeddings_f64(protected, "protected")
    C, _ = check_embeddings(candidates, name="candidates")  # kept in its dtype: no f64 copy
    n, m = Q.shape[0], C.shape[0]
    if Q.shape[1] != C.shape[1]:
        raise DataError(
            f"protected vectors have dimension {Q.shape[1]} but candidates have {C.shape[1]} "
            "(project the candidates with the public projection first)."
        )
    if targets is None:
        if n > m:
            raise DataError(f"{n} protected vectors but only {m} candidates: give targets.")
        tgt = np.arange(n)
    else:
        tgt = np.asarray(targets, dtype=np.int64).ravel()
        if tgt.size != n:
            raise DataError(f"targets has {tgt.size} entries but there are {n} protected vectors.")
        if tgt.size and (tgt.min() < 0 or tgt.max() >= m):
            raise DataError(f"targets must be rows of candidates in [0, {m}).")
    Q = unit_rows(Q)
    ranks = np.zeros(n, dtype=np.int64)
    for qs in range(0, n, block):
        Qb, tb = Q[qs : qs + block], tgt[qs : qs + block]
        own = np.einsum("ii->i", Qb @ unit_rows(np.asarray(C[tb], np.float64)).T)
        for cs in range(0, m, block):
            S = Qb @ unit_rows(np.asarray(C[cs : cs + block], np.float64)).T
            ranks[qs : qs + Qb.shape[0]] += (S >= own[:, None]).sum(axis=1)
            mine = np.flatnonzero((tb >= cs) & (tb < cs + S.shape[1]))
            ranks[qs + mine] -= S[mine, tb[mine] - cs] >= own[mine]  # the source itself
    return ranks


@dataclass(frozen=True)
class LinkageReport:
    """Re-identification rates of a linkage attack.

    ``interval[k]`` is the 95% Wilson score interval of ``top_k[k]`` over the attacked
    vectors (:meth:`scipy.stats.binomtest`); the attack beats chance at ``k`` when its lower end
    is above ``chance[k] = k / n_candidates``.
    """

    top_k: dict[int, float]
    chance: dict[int, float]
    mean_rank: float
    mrr: float
    n_protected: int
    n_candidates: int
    interval: dict[int, tuple[float, float]] = field(default_factory=dict)

    def beats_chance(self, k: int = 1) -> bool:
        """Whether the top-``k`` rate is above chance with 95% confidence."""
        lo = self.interval.get(k, (float("nan"), float("nan")))[0]
        return bool(lo > self.chance[k])

    def result(self, k: int | None = None) -> AttackResult:
        """The top-``k`` rate (default: the smallest k) against ``k / candidates``, with the
        Wilson interval of the rate shifted by the baseline."""
        k = min(self.top_k) if k is None else k
        if k not in self.top_k:
            raise ValueError(f"k must be one of {sorted(self.top_k)}, got k={k!r}.")
        lo, hi = self.interval[k]
        chance = self.chance[k]
        return AttackResult(
            "linkage", f"reid@{k}", self.top_k[k], chance, min(lo, self.top_k[k]) - chance,
            max(hi, self.top_k[k]) - chance, f"Wilson interval over {self.n_protected} records",
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["top_k"] = {str(k): v for k, v in self.top_k.items()}
        d["chance"] = {str(k): v for k, v in self.chance.items()}
        d["interval"] = {str(k): list(v) for k, v in self.interval.items()}
        return d


def rate_interval(hits: int, n: int, *, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a rate ``hits / n`` (:func:`scipy.stats.binomtest`).

    Examples
    --------
    >>> lo, hi = rate_interval(50, 100); round(lo, 3), round(hi, 3)
    (0.404, 0.596)
    """
    from scipy.stats import binomtest

    n = check_int("n", n, ge=1)
    hits = check_int("hits", hits, ge=0, le=n)
    ci = binomtest(hits, n).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


class LinkageAttack:
    """Top-k re-identification of protected vectors against a pool of candidate originals.

    Parameters
    ----------
    ks : sequence of int, default (1, 5, 10)

    Examples
    --------
    >>> X = np.eye(5); rep = LinkageAttack(ks=(1, 2)).score(X + 0.2, X)
    >>> rep.top_k, rep.chance
    ({1: 1.0, 2: 1.0}, {1: 0.2, 2: 0.4})
    """

    def __init__(self, *, ks: Sequence[int] = (1, 5, 10)) -> None:
        if isinstance(ks, int) or not ks:
            raise ValueError(f"ks must be a non-empty sequence of ints, got ks={ks!r}.")
        self.ks = tuple(sorted({check_int("k", k, ge=1) for k in ks}))

    def score(self, protected: Any, candidates: Any, *, targets: Any = None) -> LinkageReport:
        """Link ``protected`` to ``candidates`` (see :func:`linkage_ranks` for ``targets``)."""
        ranks = linkage_ranks(protected, candidates, targets)
        m = int(np.asarray(candidates).shape[0]) if np.ndim(candidates) == 2 else 1
        hits = {k: int((ranks < k).sum()) for k in self.ks}
        return LinkageReport(
            top_k={k: hits[k] / ranks.size for k in self.ks},
            chance={k: min(1.0, k / m) for k in self.ks},
            mean_rank=float(ranks.mean() + 1),
            mrr=float((1.0 / (ranks + 1)).mean()),
            n_protected=int(ranks.size),
            n_candidates=m,
            interval={k: rate_interval(hits[k], int(ranks.size)) for k in self.ks},
        )
