r"""Word-level d_X text sanitisation: multivariate Laplace noise, then a vocabulary word.

The standard mechanism ([A26] §3.2, after Feyisetan et al. 2020) replaces each word ``w`` by

.. math::
    x^* = \arg\min_{x \in D} \|w + Z - x\|_2, \qquad p(Z) \propto e^{-\varepsilon\|Z\|_2},

which is :math:`\varepsilon`-d_X private for the l2 metric between word embeddings (the nearest
word is post-processing of the noisy vector). [A26] shows that in high dimension it outputs
either ``w`` itself or an unrelated word, almost never a close neighbour of ``w``. Their fix
(§7), ``post="rank"``, post-processes :math:`x^*` once more: it outputs the word ranked ``r``
among the neighbours of :math:`x^*` (rank 0 is :math:`x^*` itself) with probability

.. math::
    P(r) = \frac{e^{-\varepsilon c r}}{\sum_{s=0}^{V-1} e^{-\varepsilon c s}},

a truncated geometric law sampled directly. The ranks are taken from :math:`x^*`, never from
the original word, so this step only sees the private output and the guarantee is unchanged.

References
----------
.. [A26] Asghar, Carpentier, Zhao, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs. arXiv:2411.13784.
.. [FBDD20] Feyisetan, Balle, Drake, Diethe (2020). Privacy- and utility-preserving textual
   analysis via calibrated multivariate perturbations. WSDM.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_real
from ..core.accounting import Guarantee, MetricDP
from ..core.rng import as_generator
from ..mechanisms.base import GeneratorSource
from ..mechanisms.laplace import LaplaceMechanism
from .index import INDEX_METHODS, NearestNeighbourIndex
from .tokenize import restore_case, tokenize
from .vocab import Vocabulary

__all__ = [
    "OOV_POLICIES",
    "POST_PROCESSING",
    "TextSanitizer",
    "WordSanitizer",
    "neighbours_at_rank",
    "sample_ranks",
]

POST_PROCESSING = ("nearest", "rank")
OOV_POLICIES = ("keep", "replace")
METRIC = "word-embedding l2"

#: neighbour lists up to these lengths come from the search index; longer ranks are found
#: exactly by one distance row per word (O(V) each, rare for any useful epsilon * c)
_RANK_BUCKETS = (16, 128, 1024)


def sample_ranks(
    lam: float, size: int, vocab_size: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    r"""Draws from :math:`P(r) \propto e^{-\lambda r}` on ``{0, ..., vocab_size - 1}``.

    Inverse CDF of the truncated geometric law: with :math:`m = 1 - e^{-\lambda V}`,
    :math:`r = \lfloor -\log(1 - U m)/\lambda \rfloor`, exact for every :math:`\lambda > 0`
    (it tends to the uniform law as :math:`\lambda \to 0`).

    Examples
    --------
    >>> r = sample_ranks(50.0, 5, 10, np.random.default_rng(0))
    >>> r.tolist()
    [0, 0, 0, 0, 0]
    """
    lam = check_real("lam", lam, gt=0)
    u = rng.random(size)
    mass = -np.expm1(-lam * vocab_size)
    r = np.floor(-np.log1p(-u * mass) / lam)
    return np.clip(r, 0, vocab_size - 1).astype(np.int64)


def neighbours_at_rank(
    index: NearestNeighbourIndex, centres: Any, ranks: Any, *, lists: Any = None
) -> NDArray[np.int64]:
    """The word ranked ``ranks[i]`` among the neighbours of word ``centres[i]``.

    Rank 0 is the centre itself; ranks 1, 2, ... order the other words by (squared) l2 distance
    from the centre. Ranks up to ``K`` are read from ``lists`` when it is given (row ``i`` holds
    ranks ``0..K`` of ``centres[i]``, as :func:`privembed.text.analysis.neighbour_lists`
    returns); the others come from batched index searches (one per length bucket), and ranks
    beyond the longest bucket, or rows an approximate index could not fill, from one exact
    distance row per word. Only ``centres`` is looked at: never any other word.

    Examples
    --------
    >>> idx = NearestNeighbourIndex(np.array([[0.0], [1.0], [3.0], [7.0]]))
    >>> neighbours_at_rank(idx, [1, 1, 1, 1], [0, 1, 2, 3]).tolist()
    [1, 0, 2, 3]
    """
    centres = np.asarray(centres, dtype=np.int64)
    ranks = np.asarray(ranks, dtype=np.int64)
    out = np.where(ranks == 0, centres, -1)
    todo = ranks > 0
    if lists is not None:
        lists = np.asarray(lists, dtype=np.int64)
        sel = np.flatnonzero(todo & (ranks < lists.shape[1]))
        out[sel] = lists[sel, ranks[sel]]
        todo[sel] = False
    for bucket in _RANK_BUCKETS:
        sel = np.flatnonzero(todo & (ranks < bucket))
        if sel.size == 0:
            continue
        _, ids = index.search(index.vectors[centres[sel]], min(bucket + 1, index.size))
        keep = (ids != centres[sel, None]) & (ids >= 0)
        hit = keep & (np.cumsum(keep, axis=1) == ranks[sel, None])
        found = hit.any(axis=1)
        rows = sel[found]
        out[rows] = ids[found, np.argmax(hit[found], axis=1)]
        todo[rows] = False
    rest = np.flatnonzero(todo)
    for b0 in range(0, rest.size, 32):
        sel = rest[b0 : b0 + 32]
        d2 = index.distance_rows(index.vectors[centres[sel]])
        d2[np.arange(sel.size), centres[sel]] = -1.0  # rank 0
        for j, i in enumerate(sel):
            out[i] = int(np.argpartition(d2[j], ranks[i])[ranks[i]])
    return out


class TextSanitizer(abc.ABC):
    """Shared text handling of word-level sanitisers.

    Subclasses implement :meth:`sanitize_ids` (vocabulary rows in, rows out) and
    :attr:`guarantee`; this class tokenises, looks words up (lower-cased), applies the
    out-of-vocabulary policy, and restores capitalisation.

    Out-of-vocabulary policy (``oov``):

    * ``"keep"`` -- the token is output unchanged: it gets **no** protection.
    * ``"replace"`` -- the token is replaced by a vocabulary word drawn uniformly at random
      (as SanText does): the output does not depend on the token at all.
    """

    def __init__(self, *, vocabulary: Vocabulary, epsilon: float, oov: str) -> None:
        """The parameters every sanitiser takes, checked once here."""
        if not isinstance(vocabulary, Vocabulary):
            raise TypeError(f"vocabulary must be a Vocabulary, got vocabulary={vocabulary!r}.")
        self.vocabulary = vocabulary
        self.epsilon = check_real("epsilon", epsilon, gt=0)
        self.oov = check_choice("oov", oov, OOV_POLICIES)

    @property
    @abc.abstractmethod
    def guarantee(self) -> Guarantee:
        """The privacy guarantee per in-vocabulary word token."""

    @abc.abstractmethod
    def sanitize_ids(
        self, ids: Any, *, rng: Any = None, on_progress: Callable[[int], None] | None = None
    ) -> NDArray[np.int64]:
        """Sanitise vocabulary rows: ``ids`` (n,) -> output rows (n,).

        ``on_progress(done)`` is called with the number of rows done so far as the work proceeds.
        """

    def _check_ids(self, ids: Any) -> NDArray[np.int64]:
        arr = np.asarray(ids)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise DataError(f"ids must be a 1-D array of vocabulary rows, got shape {arr.shape}.")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= len(self.vocabulary)):
            raise DataError(
                f"ids must lie in [0, {len(self.vocabulary)}), got values in "
                f"[{int(arr.min())}, {int(arr.max())}]."
            )
        return arr

    def sanitize_many(
        self,
        texts: Sequence[str],
        *,
        rng: Any = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> list[str]:
        """Sanitise a corpus: every in-vocabulary word of every text goes through one batched
        :meth:`sanitize_ids` call (noise drawn and nearest words searched in large blocks).

        Parameters
        ----------
        texts : sequence of str
        rng : int, numpy.random.Generator or None
        on_progress : callable, optional
            Called with the number of in-vocabulary words sanitised so far (progress); the
            total is :meth:`count_words` of ``texts``.

        Returns
        -------
        list of str
            Same punctuation and whitespace; each word replaced (case pattern kept).
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str; use sanitize() for one text.")
        gen = as_generator(rng)
        docs = [tokenize(t) for t in texts]
        words = [tok.text for doc in docs for tok in doc if tok.is_word]
        ids = self.vocabulary.lookup(words)
        inv = ids >= 0
        out_ids = ids.copy()
        out_ids[inv] = self.sanitize_ids(ids[inv], rng=gen, on_progress=on_progress)
        n_oov = int((~inv).sum())
        if self.oov == "replace" and n_oov:
            out_ids[~inv] = gen.integers(0, len(self.vocabulary), size=n_oov)
        vocab_words = self.vocabulary.words
        result: list[str] = []
        j = 0
        for doc in docs:
            parts: list[str] = []
            for tok in doc:
                if tok.is_word:
                    row = int(out_ids[j])
                    parts.append(tok.text if row < 0 else restore_case(tok.text, vocab_words[row]))
                    j += 1
                else:
                    parts.append(tok.text)
            result.append("".join(parts))
        return result

    def count_words(self, texts: Sequence[str]) -> int:
        """How many in-vocabulary word tokens ``texts`` holds (the work of :meth:`sanitize_many`)."""
        words = [tok.text for t in texts for tok in tokenize(t) if tok.is_word]
        return int((self.vocabulary.lookup(words) >= 0).sum())

    def sanitize(self, text: str, *, rng: Any = None) -> str:
        """Sanitise one text (see :meth:`sanitize_many`)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got text={text!r}.")
        return self.sanitize_many([text], rng=rng)[0]

    def _oov_note(self) -> str:
        if self.oov == "keep":
            return "out-of-vocabulary tokens are output verbatim and are not protected"
        return "out-of-vocabulary tokens are replaced by uniform random words"


class WordSanitizer(TextSanitizer):
    r"""Multivariate Laplace word sanitiser with nearest-word or rank-based post-processing.

    Parameters
    ----------
    vocabulary : Vocabulary
        Words and their embeddings (the noise is added in this space, unnormalised).
    epsilon : float, > 0
        Privacy per unit of l2 distance between word embeddings.
    post : {"nearest", "rank"}
        ``"nearest"``: output :math:`x^*`, the word nearest to the noisy vector ([A26] eq. 3).
        ``"rank"``: the [A26] §7 fix, output the rank-``r`` neighbour of :math:`x^*` with
        :math:`P(r) \propto e^{-\varepsilon c r}`.
    c : float, > 0
        Rank temperature; required with ``post="rank"`` (and only then). [A26] use
        ``c = 0.04`` on GloVe 300d; :func:`privembed.text.calibrate_rank_c` picks one for a
        vocabulary from the output proportions.
    oov : {"keep", "replace"}
        Out-of-vocabulary policy (see :class:`TextSanitizer`).
    index : {"exact", "hnsw"} or NearestNeighbourIndex
        Search over the vocabulary. An approximate index is still post-processing.

    Notes
    -----
    The noise comes from the shared :class:`~privembed.mechanisms.LaplaceMechanism`
    (:func:`~privembed.mechanisms.laplace.sample_l2_laplace`: Gamma(d, 1/epsilon) radius times
    a uniform direction), on the raw embeddings (``input_norm="none"``). For a document of ``m``
    words the guarantee composes over words: the bound is ``epsilon`` times the sum of the
    per-word distances.

    Examples
    --------
    >>> voc = Vocabulary(words=["cat", "dog", "car"], vectors=[[0.0, 0.0], [0.5, 0.0], [9.0, 9.0]])
    >>> san = WordSanitizer(vocabulary=voc, epsilon=1000.0)
    >>> san.sanitize("Cat, CAT and cat.", rng=0)
    'Cat, CAT and cat.'
    >>> san.guarantee.describe()
    '1000-d_X privacy per unit of word-embedding l2 distance; out-of-vocabulary tokens are output verbatim and are not protected'
    """

    def __init__(
        self,
        *,
        vocabulary: Vocabulary,
        epsilon: float,
        post: str = "nearest",
        c: float | None = None,
        oov: str = "keep",
        index: str | NearestNeighbourIndex = "exact",
    ) -> None:
        super().__init__(vocabulary=vocabulary, epsilon=epsilon, oov=oov)
        self.post = check_choice("post", post, POST_PROCESSING)
        if self.post == "rank":
            if c is None:
                raise ValueError(
                    "c must be given with post='rank' (e.g. c=0.04 as in [A26], or pick one "
                    "with privembed.text.calibrate_rank_c), got c=None."
                )
            self.c: float | None = check_real("c", c, gt=0)
        else:
            if c is not None:
                raise ValueError(f"c only applies to post='rank', got c={c!r} with post='nearest'.")
            self.c = None
        if isinstance(index, NearestNeighbourIndex):
            if (index.size, index.dim) != (len(vocabulary), vocabulary.dim):
                raise DataError(
                    f"index has {index.size} vectors of dimension {index.dim}, but the vocabulary "
                    f"has {len(vocabulary)} of dimension {vocabulary.dim}."
                )
            self.index = index
        else:
            check_choice("index", index, INDEX_METHODS)
            self.index = NearestNeighbourIndex(vocabulary.vectors, method=index)
        self.mechanism = LaplaceMechanism(
            epsilon=self.epsilon, input_norm="none", renormalize=False
        )

    def __repr__(self) -> str:
        c = f", c={self.c!r}" if self.c is not None else ""
        return (
            f"WordSanitizer(vocabulary={self.vocabulary!r}, epsilon={self.epsilon!r}, "
            f"post={self.post!r}{c}, oov={self.oov!r}, index={self.index.method!r})"
        )

    @property
    def guarantee(self) -> Guarantee:
        note = self._oov_note()
        if self.post == "rank":
            note = "rank post-processing of the nearest word; " + note
        return MetricDP(self.epsilon, metric=METRIC, note=note)

    def noisy_vectors(self, ids: Any, *, rng: Any = None) -> NDArray[np.float64]:
        """``w + Z`` for each vocabulary row in ``ids``: the private vectors, shape (n, d)."""
        arr = self._check_ids(ids)
        source = GeneratorSource(as_generator(rng))
        return self.mechanism.privatize_block(self.vocabulary.vectors[arr], source)

    def post_process(
        self, nearest_ids: Any, *, rng: Any = None, lists: Any = None
    ) -> NDArray[np.int64]:
        """The rank step alone: a function of :math:`x^*` (``nearest_ids``) and fresh randomness.

        Returns ``nearest_ids`` unchanged for ``post="nearest"``. ``lists`` optionally holds
        precomputed neighbour lists of ``nearest_ids`` (see :func:`neighbours_at_rank`).
        """
        xstar = self._check_ids(nearest_ids)
        if self.post == "nearest":
            return xstar.copy()
        assert self.c is not None
        ranks = sample_ranks(
            self.epsilon * self.c, xstar.size, len(self.vocabulary), as_generator(rng)
        )
        return neighbours_at_rank(self.index, xstar, ranks, lists=lists)

    #: Words per noise draw and index search: bounds memory (``block_words * d`` noise values)
    #: and paces progress; a seeded result depends on it, not on the texts' grouping.
    block_words: int = 8192

    def sanitize_ids(
        self, ids: Any, *, rng: Any = None, on_progress: Callable[[int], None] | None = None
    ) -> NDArray[np.int64]:
        """Sanitise vocabulary rows (noise drawn and searched ``block_words`` rows at a time).

        Parameters
        ----------
        ids : array_like of int, shape (n,)
        rng : int, numpy.random.Generator or None
        on_progress : callable, optional
            Called with the number of rows done after every block.

        Returns
        -------
        ndarray of int64, shape (n,)
        """
        arr = self._check_ids(ids)
        if arr.size == 0:
            return arr.copy()
        gen = as_generator(rng)
        out = np.empty_like(arr)
        for b0 in range(0, arr.size, self.block_words):
            b1 = min(b0 + self.block_words, arr.size)
            xstar = self.index.nearest(self.noisy_vectors(arr[b0:b1], rng=gen))
            out[b0:b1] = self.post_process(xstar, rng=gen)
            if on_progress is not None:
                on_progress(b1)
        return out
