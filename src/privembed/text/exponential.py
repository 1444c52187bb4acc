r"""The SanText exponential mechanism (Yue et al. 2021), the baseline of [A26] Fig. 9.

Each word ``w`` is replaced by ``x`` with probability

.. math::
    P(x \mid w) = \frac{e^{-\varepsilon \|w - x\|_2 / 2}}{\sum_{y \in D} e^{-\varepsilon \|w - y\|_2 / 2}},

which is :math:`\varepsilon`-d_X private for the l2 metric between word embeddings (the score
changes by at most :math:`\|w - w'\|/2` and so does the log-normaliser).

Sampling never materialises a ``V x V`` matrix: the distance rows of the distinct words of a
batch are computed a few rows at a time, and each occurrence of a word takes one uniform draw
through the inverse CDF of its row (exact, float64 cumulative sums).

References
----------
.. [YDWLSC21] Yue, Du, Wang, Li, Sun, Chow (2021). Differential privacy for text analytics via
   natural text sanitization. Findings of ACL-IJCNLP.
.. [A26] Asghar, Carpentier, Zhao, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs. §7, Fig. 9.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import check_int, check_real
from ..core.accounting import Guarantee, MetricDP
from ..core.rng import as_generator
from .index import DistanceRows
from .sanitizer import METRIC, TextSanitizer
from .vocab import Vocabulary

__all__ = ["ExponentialSanitizer", "sample_exponential"]


def sample_exponential(
    distances: NDArray[Any],
    epsilon: float,
    rng: np.random.Generator,
    *,
    counts: NDArray[np.int64] | None = None,
) -> list[NDArray[np.int64]]:
    r"""Sample columns with :math:`P(j \mid i) \propto e^{-\varepsilon D_{ij}/2}`, row by row.

    Parameters
    ----------
    distances : ndarray, shape (b, V)
        l2 distances (not squared); not modified.
    epsilon : float, > 0
    rng : numpy.random.Generator
    counts : ndarray of int, shape (b,), optional
        Draws per row (default 1 each).

    Returns
    -------
    list of ndarray of int64
        ``counts[i]`` column indices for row ``i``.

    Examples
    --------
    >>> D = np.array([[0.0, 1000.0, 1000.0]])
    >>> sample_exponential(D, 1.0, np.random.default_rng(0), counts=np.array([3]))[0].tolist()
    [0, 0, 0]
    """
    epsilon = check_real("epsilon", epsilon, gt=0)
    D = np.asarray(distances, dtype=np.float64)
    if counts is None:
        counts = np.ones(D.shape[0], dtype=np.int64)
    W = D - D.min(axis=1, keepdims=True)
    W *= -0.5 * epsilon
    np.exp(W, out=W)
    np.cumsum(W, axis=1, out=W)
    out: list[NDArray[np.int64]] = []
    last = W.shape[1] - 1
    for i in range(W.shape[0]):
        u = rng.random(int(counts[i])) * W[i, last]
        j = np.searchsorted(W[i], u, side="right")
        out.append(np.minimum(j, last).astype(np.int64))
    return out


class ExponentialSanitizer(TextSanitizer):
    r"""SanText: replace ``w`` by ``x`` with probability :math:`\propto e^{-\varepsilon\|w-x\|/2}`.

    Parameters
    ----------
    vocabulary : Vocabulary
    epsilon : float, > 0
        Privacy per unit of l2 distance between word embeddings.
    oov : {"keep", "replace"}
        Out-of-vocabulary policy (see :class:`~privembed.text.TextSanitizer`).
    block_rows : int
        Distinct words whose distance rows are held at once (memory ``8 * block_rows * V``
        bytes).

    Examples
    --------
    >>> voc = Vocabulary(words=["cat", "dog", "car"], vectors=[[0.0, 0.0], [0.5, 0.0], [9.0, 9.0]])
    >>> san = ExponentialSanitizer(vocabulary=voc, epsilon=2.0)
    >>> p = san.probabilities(0)
    >>> bool(np.isclose(p.sum(), 1.0)), bool(p[0] > p[1] > p[2])
    (True, True)
    """

    def __init__(
        self, *, vocabulary: Vocabulary, epsilon: float, oov: str = "keep", block_rows: int = 32
    ) -> None:
        super().__init__(vocabulary=vocabulary, epsilon=epsilon, oov=oov)
        self.block_rows = check_int("block_rows", block_rows, ge=1)
        self._rows: DistanceRows | None = None

    def __repr__(self) -> str:
        return (
            f"ExponentialSanitizer(vocabulary={self.vocabulary!r}, epsilon={self.epsilon!r}, "
            f"oov={self.oov!r})"
        )

    @property
    def guarantee(self) -> Guarantee:
        return MetricDP(
            self.epsilon, metric=METRIC, note="exponential mechanism; " + self._oov_note()
        )

    def distances(self, ids: Any) -> NDArray[np.float64]:
        """l2 distances from the words ``ids`` to the whole vocabulary, shape (len(ids), V)."""
        arr = self._check_ids(ids)
        if self._rows is None:  # float64 copy of the vocabulary, made once
            self._rows = DistanceRows(self.vocabulary.vectors)
        return np.sqrt(self._rows.squared(self._rows.X[arr]))

    def probabilities(self, word_id: int) -> NDArray[np.float64]:
        """The exact output law for one word, shape (V,)."""
        d = self.distances(np.array([check_int("word_id", word_id, ge=0)]))[0]
        logp = -0.5 * self.epsilon * (d - d.min())
        p = np.exp(logp)
        return p / p.sum()

    def sanitize_ids(
        self, ids: Any, *, rng: Any = None, on_progress: Callable[[int], None] | None = None
    ) -> NDArray[np.int64]:
        """Sanitise vocabulary rows; each distinct word's distance row is computed once.

        ``on_progress(done)`` gets the number of rows done after every block of distinct words.
        """
        arr = self._check_ids(ids)
        gen = as_generator(rng)
        out = np.empty_like(arr)
        uniq, inverse, counts = np.unique(arr, return_inverse=True, return_counts=True)
        order = np.argsort(inverse, kind="stable")  # positions grouped by distinct word
        starts = np.concatenate(([0], np.cumsum(counts)))
        for b0 in range(0, uniq.size, self.block_rows):
            b1 = min(b0 + self.block_rows, uniq.size)
            draws = sample_exponential(
                self.distances(uniq[b0:b1]), self.epsilon, gen, counts=counts[b0:b1]
            )
            for k, picked in enumerate(draws, start=b0):
                out[order[starts[k] : starts[k + 1]]] = picked
            if on_progress is not None:
                on_progress(int(starts[b1]))
        return out
