"""The corpus' similarity distribution seen from sample queries: :class:`ScoreProfile`.

A profile holds, per sample query, the histogram of its clean cosines to every document and its
largest ones (for a subspace mechanism, the cosines in the subspace and the documents' signal
norms), and the residual equicorrelation of the query-side model: what the rank model of
:mod:`privembed.search.rerank` needs of the corpus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_embeddings, check_int, check_keywords, check_real
from ..core.rng import as_generator
from ..mechanisms.base import Mechanism
from .rerank_law import _NORM_LAWS

#: bins of the clean-score histogram over [-1, 1]
DEFAULT_BINS = 2000


class ProfileSample(TypedDict, total=False):
    """How a profile scores its sample queries against the corpus: the keywords
    :meth:`ScoreProfile.from_embeddings` and :meth:`ScoreProfile.from_subspace` share (all
    optional).

    Attributes
    ----------
    top_k : int, default 100
        Largest k for which the profile can answer.
    bins : int, default :data:`DEFAULT_BINS`
        Bins of the clean-score histogram over [-1, 1].
    block : int, default 256
        Sample queries scored at a time.
    exclude_identical : bool, default True
        Leave out a query's own document (cosine above 1 - 1e-6), so that documents of the
        corpus can serve as sample queries.
    sources : array_like of int, shape (n_queries,), optional
        The row of ``documents`` each query was made from (:func:`pseudo_queries`): left out
        of that query's scores.
    rng : int, Generator or None
        The randomness the profile draws (:meth:`~ScoreProfile.from_embeddings`: the
        documents sampled for ``rho``; :meth:`~ScoreProfile.from_subspace`: the dilution).
    """

    top_k: int
    bins: int
    block: int
    exclude_identical: bool
    sources: Any
    rng: Any


class SubspaceSample(ProfileSample, total=False):
    """:class:`ProfileSample` and what only :meth:`ScoreProfile.from_subspace` takes.

    Attributes
    ----------
    norm_nodes : int, default 32
        Quantiles of the documents' signal norms kept.
    dilution : float, default 0
        Pseudo-queries only: the relative size of the isotropic noise that dilutes the
        projected queries.
    """

    norm_nodes: int
    dilution: float


@dataclass(frozen=True)
class ScoreProfile:
    r"""Clean-score histograms of sample queries against the whole corpus.

    Attributes
    ----------
    counts : ndarray of int64, shape (n_queries, bins)
        Documents per score bin, for each sample query (all ``n_docs`` documents).
    top : ndarray of float64, shape (n_queries, top_k)
        Each sample query's largest clean scores, descending.
    n_docs : int
    dim : int
        Embedding dimension.
    rho : float
        Mean cosine between the documents' components orthogonal to a query (the residual
        equicorrelation of the query-side model); 0 for isotropic documents.
    edges : ndarray, shape (bins + 1,)
        Bin edges over [-1, 1].
    norms : ndarray, optional
        For a subspace mechanism (:meth:`from_subspace`): equal-mass quantiles of the
        documents' signal norms :math:`\|P(x - \mu)\|` (noise of a fixed scale perturbs a
        short signal more); ``None`` for unit vectors.
    top_norms : ndarray, shape (n_queries, top_k), optional
        The signal norms of each sample query's true top documents (subspace profiles).
    """

    counts: NDArray[np.int64]
    top: NDArray[np.float64]
    n_docs: int
    dim: int
    rho: float = 0.0
    edges: NDArray[np.float64] | None = None
    norms: NDArray[np.float64] | None = None
    top_norms: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts, dtype=np.int64)
        top = np.asarray(self.top, dtype=np.float64)
        if (
            counts.ndim != 2
            or top.ndim != 2
            or counts.shape[0] != top.shape[0]
            or counts.shape[0] < 1
        ):
            raise DataError(
                f"counts (n_queries, bins) and top (n_queries, top_k) must be 2-D with the same "
                f"rows, got shapes {counts.shape} and {top.shape}."
            )
        edges = (
            np.linspace(-1.0, 1.0, counts.shape[1] + 1)
            if self.edges is None
            else np.asarray(self.edges, float)
        )
        if edges.shape != (counts.shape[1] + 1,):
            raise DataError(
                f"edges must have bins + 1 = {counts.shape[1] + 1} entries, got {edges.shape}."
            )
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "top", top)
        object.__setattr__(self, "edges", edges)
        if (self.norms is None) != (self.top_norms is None):
            raise DataError("norms and top_norms go together (a subspace profile has both).")
        if self.norms is not None:
            nm = np.asarray(self.norms, dtype=np.float64).ravel()
            tn = np.asarray(self.top_norms, dtype=np.float64)
            if tn.shape != top.shape or nm.size < 1 or not (nm > 0).all() or not (tn > 0).all():
                raise DataError(
                    f"norms must be positive and top_norms shaped like top {top.shape}, got "
                    f"{tn.shape}."
                )
            object.__setattr__(self, "norms", nm)
            object.__setattr__(self, "top_norms", tn)
        object.__setattr__(self, "n_docs", check_int("n_docs", self.n_docs, ge=2))
        object.__setattr__(self, "dim", check_int("dim", self.dim, ge=3))
        object.__setattr__(self, "rho", check_real("rho", self.rho, ge=0, lt=1))

    @property
    def n_queries(self) -> int:
        return int(self.counts.shape[0])

    @classmethod
    def from_scores(
        cls,
        scores: Any,
        *,
        dim: int,
        top_k: int = 100,
        bins: int = DEFAULT_BINS,
        rho: float = 0.0,
        exclude_identical: bool = False,
    ) -> ScoreProfile:
        """A profile from clean cosines ``scores`` of shape (n_queries, n_docs).

        ``exclude_identical`` drops, per query, the scores above 1 - 1e-6 (the query's own
        document when documents stand in for queries); ``n_docs`` is then the smallest count
        left over the queries.
        """
        S = np.asarray(scores, dtype=np.float64)
        if S.ndim != 2 or S.shape[1] < 2:
            raise DataError(
                f"scores must be (n_queries, n_docs) with n_docs >= 2, got shape {S.shape}."
            )
        if exclude_identical:
            S = np.where(S > 1.0 - 1e-6, -np.inf, S)
        bins, top_k, edges = _grid(bins, top_k, S.shape[1])
        idx = np.clip(np.searchsorted(edges, np.clip(S, -1.0, 1.0), side="right") - 1, 0, bins - 1)
        counts = np.zeros((S.shape[0], bins), dtype=np.int64)
        for r in range(S.shape[0]):
            counts[r] = np.bincount(idx[r][np.isfinite(S[r])], minlength=bins)
        top = -np.sort(
            -np.partition(S, S.shape[1] - top_k, axis=1)[:, S.shape[1] - top_k :], axis=1
        )
        if exclude_identical and not np.isfinite(top).all():
            raise DataError("fewer than top_k documents are left after excluding identical ones.")
        return cls(counts, top, int(counts.sum(axis=1).min()), dim, rho, edges)

    @classmethod
    def from_embeddings(
        cls,
        queries: Any,
        documents: Any,
        *,
        rho_sample: int = 2000,
        **sample: Unpack[ProfileSample],
    ) -> ScoreProfile:
        """A profile from sample query embeddings and the corpus' (exact) document embeddings.

        Parameters
        ----------
        queries : array_like, shape (n_queries, d)
            Sample queries (a few hundred suffice; documents may stand in for queries). Use
            queries that are not the ones you evaluate on.
        documents : array_like, shape (n_docs, d)
            The whole corpus, exact vectors (inside the trust boundary).
        top_k : int, default 100
            Largest k for which the profile can answer.
        rho_sample : int, default 2000
            Documents sampled (with ``rng``) to estimate :attr:`rho`.
        exclude_identical : bool, default True
            Leave out a query's own document (cosine above 1 - 1e-6), so that documents of the
            corpus can serve as sample queries.
        sources : array_like of int, shape (n_queries,), optional
            The row of ``documents`` each query was made from (:func:`pseudo_queries`): left
            out of that query's scores.
        **sample
            :class:`ProfileSample`: also ``bins``, ``block`` (queries scored at a time) and
            ``rng`` (the documents sampled for ``rho``).
        """
        check_keywords("ScoreProfile.from_embeddings", sample, ProfileSample)
        smp = _Sample.of(queries, documents, sample, spare=0)
        Q, D32, src, block = smp.Q, smp.D32, smp.src, smp.block
        counts = np.zeros((Q.shape[0], smp.bins), dtype=np.int64)
        top = np.zeros((Q.shape[0], smp.top_k))
        for s in range(0, Q.shape[0], block):
            S = (Q[s : s + block].astype(np.float32) @ D32.T).astype(np.float64)
            if src is not None:
                S[np.arange(S.shape[0]), src[s : s + block]] = -np.inf
            part = cls.from_scores(
                S, dim=Q.shape[1], top_k=smp.top_k, bins=smp.bins,
                exclude_identical=smp.exclude_identical,
            )  # fmt: skip
            counts[s : s + S.shape[0]] = part.counts
            top[s : s + S.shape[0]] = part.top
        gen = as_generator(smp.rng)
        pick = gen.choice(
            D32.shape[0],
            size=min(check_int("rho_sample", rho_sample, ge=2), D32.shape[0]),
            replace=False,
        )
        return cls(
            counts,
            top,
            int(counts.sum(axis=1).min()),
            Q.shape[1],
            _residual_rho(Q, D32[pick].astype(np.float64)),
            smp.edges,
        )

    @classmethod
    def from_subspace(
        cls,
        queries: Any,
        documents: Any,
        mechanism: Mechanism,
        **sample: Unpack[SubspaceSample],
    ) -> ScoreProfile:
        r"""A profile for a mechanism that releases in a subspace (``subspace``): clean scores
        where the protected scores are formed.

        The true top documents are those of the clean *full-dimension* cosine (what re-ranking
        recovers); the scores recorded are the cosines in the subspace,
        :math:`\cos(P(q - \mu), P(x - \mu))` (what the store ranks by, before noise), with the
        documents' signal norms :math:`\|P(x - \mu)\|` (:attr:`norms`, :attr:`top_norms`),
        since noise of a fixed scale turns a short signal further. ``dim`` is k.

        Parameters
        ----------
        queries, documents : array_like
            As for :meth:`from_embeddings` (exact vectors, inside the trust boundary).
        mechanism : Mechanism
            With ``public_transform`` (the noise-free projection) and ``cosine_draws``.
        norm_nodes : int, default 32
            Quantiles of the documents' signal norms kept.
        sources : array_like of int, optional
            As for :meth:`from_embeddings`.
        dilution : float, default 0
            Pseudo-queries (:func:`pseudo_queries`) only: dilute the *projected* queries too,
            with isotropic noise of this relative size in the k dimensions (isotropic noise
            in d dimensions puts only k/d of its energy into the subspace, where a document
            used as a query would stay as close to its neighbours as before).
        rng : int, Generator or None
            The dilution's noise.
        **sample
            :class:`SubspaceSample`: these and :class:`ProfileSample`'s ``top_k``, ``bins``,
            ``block`` and ``exclude_identical``, as for :meth:`from_embeddings`.
        """
        # a query's own document may be left out: top_k is at most n_docs - 1
        check_keywords("ScoreProfile.from_subspace", sample, SubspaceSample)
        smp = _Sample.of(queries, documents, sample, spare=1)
        if not mechanism.has_public_transform or mechanism.name not in _NORM_LAWS:
            raise ValueError(
                f"from_subspace needs a subspace mechanism (public_transform and a cosine law "
                f"per signal norm), got {mechanism!r}."
            )
        dilution, norm_nodes = sample.get("dilution", 0.0), sample.get("norm_nodes", 32)
        A32, V32, r = _subspace_directions(mechanism, smp.Q, smp.D32, dilution, smp.rng)
        counts, top, top_norms, n_docs = _subspace_scores(
            smp.Q, smp.D32, A32, V32, r, smp.src, smp.edges, smp.top_k, smp.block,
            smp.exclude_identical,
        )  # fmt: skip
        if not np.isfinite(top).all():
            raise DataError("fewer than top_k documents are left after excluding identical ones.")
        pos = r[r > 0]
        if pos.size == 0:
            raise DataError("every document projects to zero in the subspace.")
        nodes = np.quantile(pos, (np.arange(norm_nodes) + 0.5) / norm_nodes)
        return cls(
            counts,
            top,
            n_docs,
            int(A32.shape[1]),
            0.0,
            smp.edges,
            nodes,
            np.maximum(top_norms, float(pos.min())),
        )

    def save(self, path: str | Path) -> Path:
        """Write the profile to an ``.npz`` file (a few hundred kB)."""
        p = Path(path)
        with p.open("wb") as fh:
            np.savez_compressed(fh, **self._arrays())
        return p

    def _arrays(self) -> dict[str, Any]:
        """The arrays of a profile file (:meth:`from_arrays` reads them back); the subspace
        arrays only for a subspace profile."""
        out = {
            "counts": self.counts,
            "top": self.top,
            "edges": np.asarray(self.edges),
            "meta": np.array([self.n_docs, self.dim], dtype=np.int64),
            "rho": np.array([self.rho]),
        }
        if self.norms is not None:
            out.update(norms=np.asarray(self.norms), top_norms=np.asarray(self.top_norms))
        return out

    @classmethod
    def from_arrays(cls, z: Any) -> ScoreProfile:
        """A profile from the arrays :meth:`save` writes (an ``np.load`` result or a dict)."""
        return cls(
            z["counts"],
            z["top"],
            int(z["meta"][0]),
            int(z["meta"][1]),
            float(z["rho"][0]),
            z["edges"],
            z["norms"] if "norms" in z else None,
            z["top_norms"] if "top_norms" in z else None,
        )

    @classmethod
    def load(cls, path: str | Path) -> ScoreProfile:
        """Read a profile written by :meth:`save`."""
        with np.load(Path(path)) as z:
            try:
                return cls.from_arrays(z)
            except KeyError as exc:
                raise DataError(f"{path} is not a score profile (missing {exc}).") from None


def _grid(bins: int, top_k: int, most: int) -> tuple[int, int, NDArray[np.float64]]:
    """The checked ``bins``, ``top_k`` (at most ``most``) and the histogram's bin edges."""
    bins = check_int("bins", bins, ge=10)
    top_k = min(check_int("top_k", top_k, ge=1), most)
    return bins, top_k, np.linspace(-1.0, 1.0, bins + 1)


@dataclass(frozen=True)
class _Sample:
    """What both constructors score from: the unit queries and documents, the queries' source
    rows, and the :class:`ProfileSample` keywords checked, with their defaults."""

    Q: NDArray[np.float64]
    D32: NDArray[np.float32]
    src: NDArray[np.int64] | None
    bins: int
    top_k: int
    edges: NDArray[np.float64]
    block: int
    exclude_identical: bool
    rng: Any

    @classmethod
    def of(cls, queries: Any, documents: Any, sample: ProfileSample, *, spare: int) -> _Sample:
        """Check and normalise the inputs; ``top_k`` is at most ``n_docs - spare``."""
        Q, _ = check_embeddings(queries, name="queries")
        D, _ = check_embeddings(documents, name="documents", dim=Q.shape[1])
        src = _sources(sample.get("sources"), Q.shape[0], D.shape[0])
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        D32 = np.ascontiguousarray(D / np.linalg.norm(D, axis=1, keepdims=True), dtype=np.float32)
        bins, top_k, edges = _grid(
            sample.get("bins", DEFAULT_BINS), sample.get("top_k", 100), D.shape[0] - spare
        )
        return cls(
            Q, D32, src, bins, top_k, edges, sample.get("block", 256),
            sample.get("exclude_identical", True), sample.get("rng"),
        )  # fmt: skip


def _subspace_directions(
    mechanism: Mechanism, Qn: NDArray[Any], D32: NDArray[np.float32], dilution: float, rng: Any
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float64]]:
    """The queries' and documents' unit directions in the subspace (the queries diluted with
    relative size ``dilution``) and the documents' signal norms."""
    V = np.asarray(mechanism.public_transform(D32), dtype=np.float64)
    r = np.linalg.norm(V, axis=1)
    V32 = (V / np.maximum(r, 1e-300)[:, None]).astype(np.float32)
    A = np.asarray(mechanism.public_transform(Qn), dtype=np.float64)
    A = A / np.maximum(np.linalg.norm(A, axis=1), 1e-300)[:, None]
    beta = check_real("dilution", dilution, ge=0)
    if beta > 0:
        A = A + beta * as_generator(rng).standard_normal(A.shape) / math.sqrt(A.shape[1])
    A32 = (A / np.maximum(np.linalg.norm(A, axis=1), 1e-300)[:, None]).astype(np.float32)
    return A32, V32, r


def _subspace_scores(
    Qn: NDArray[Any],
    D32: NDArray[np.float32],
    A32: NDArray[np.float32],
    V32: NDArray[np.float32],
    r: NDArray[np.float64],
    src: NDArray[np.int64] | None,
    edges: NDArray[np.float64],
    top_k: int,
    block: int,
    exclude_identical: bool,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], int]:
    """Per query, block by block: the histogram of subspace cosines, the subspace cosines and
    signal norms of the true (full-dimension) top documents, and the fewest documents scored."""
    bins = edges.size - 1
    counts = np.zeros((Qn.shape[0], bins), dtype=np.int64)
    top = np.zeros((Qn.shape[0], top_k))
    top_norms = np.zeros((Qn.shape[0], top_k))
    n_used = []
    for s in range(0, Qn.shape[0], block):
        full = (Qn[s : s + block].astype(np.float32) @ D32.T).astype(np.float64)
        sub = np.clip((A32[s : s + block] @ V32.T).astype(np.float64), -1.0, 1.0)
        same = full > 1.0 - 1e-6 if exclude_identical else np.zeros(full.shape, bool)
        if src is not None:
            same[np.arange(full.shape[0]), src[s : s + block]] = True
        full = np.where(same, -np.inf, full)
        sub = np.where(same, np.nan, sub)
        idx = np.clip(np.searchsorted(edges, sub, side="right") - 1, 0, bins - 1)
        for i in range(full.shape[0]):
            ok = np.isfinite(sub[i])
            counts[s + i] = np.bincount(idx[i][ok], minlength=bins)
            n_used.append(int(ok.sum()))
            best = np.argpartition(-full[i], top_k - 1)[:top_k]
            best = best[np.argsort(-full[i][best], kind="stable")]
            top[s + i] = sub[i][best]
            top_norms[s + i] = r[best]
    return counts, top, top_norms, int(min(n_used))


def document_rows(sample: Any, documents: Any, *, block: int = 256) -> NDArray[np.int64]:
    """The row of ``documents`` that each row of ``sample`` is (cosine above 1 - 1e-6).

    Raises
    ------
    DataError
        A sample row that is not one of the documents.
    """
    S, _ = check_embeddings(sample, name="sample")
    D, _ = check_embeddings(documents, name="documents", dim=np.shape(S)[-1])
    S32 = np.atleast_2d(np.asarray(S, dtype=np.float32))
    S32 = S32 / np.linalg.norm(S32, axis=1, keepdims=True)
    D32 = np.asarray(D, dtype=np.float32)
    D32 = D32 / np.linalg.norm(D32, axis=1, keepdims=True)
    out = np.empty(S32.shape[0], dtype=np.int64)
    for s in range(0, S32.shape[0], block):
        C = S32[s : s + block] @ D32.T
        out[s : s + C.shape[0]] = np.argmax(C, axis=1)
        if not (C.max(axis=1) > 1.0 - 1e-5).all():
            raise DataError("a sample row is not one of the documents.")
    return out


def _sources(sources: Any, n_queries: int, n_docs: int) -> NDArray[np.int64] | None:
    if sources is None:
        return None
    src = np.asarray(sources)
    if src.shape != (n_queries,) or not np.issubdtype(src.dtype, np.integer):
        raise DataError(f"sources must be {n_queries} row numbers, got shape {src.shape}.")
    if src.size and (src.min() < 0 or src.max() >= n_docs):
        raise DataError(f"sources must be row numbers in [0, {n_docs}).")
    return src.astype(np.int64)


def _residual_rho(Q: NDArray[np.float64], D: NDArray[np.float64]) -> float:
    """Mean pairwise cosine of the documents' unit components orthogonal to each query.

    Uses ``mean_{i != k} w_i . w_k = (n |mean w|^2 - 1) / (n - 1)``, averaged over the queries.
    """
    vals = []
    for q in Q[: min(len(Q), 64)]:
        W = D - np.outer(D @ q, q)
        W /= np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-12)
        n = W.shape[0]
        m = W.mean(axis=0)
        vals.append((n * float(m @ m) - 1.0) / (n - 1))
    return float(min(max(np.mean(vals), 0.0), 0.99))
