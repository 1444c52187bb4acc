r"""Evaluation data: the Lee corpus, word similarity, a PII sentence corpus and MTEB tasks.

Everything here loads offline from what ships with the environment, except the MTEB loaders,
which read a local folder in MTEB's hub layout or download one where a hub is reachable.

* :func:`lee_corpus` -- the 50 Lee news documents with human similarity judgments for all 1,225
  pairs (gensim's bundled test data; Lee, Pincombe & Welsh 2005), as an STS task.
  :func:`lee_background` -- the 300 background documents (or their sentences).
* :func:`word_similarity` -- WordSim353 / SimLex-999 (gensim's copies) for word vectors.
* :func:`pii_sentences` -- PII sentences from templates filled by Faker, with the ground truth
  (entity spans, types, sensitive tokens). Templates: presidio-evaluator's template file when
  that package is installed, otherwise privembed's own templates in the same ``{{slot}}``
  format (:data:`TEMPLATES`), or any file you pass.
* :func:`load_mteb_sts`, :func:`load_mteb_retrieval` -- MTEB / BEIR tasks (STS12, FiQA, ...,
  as used by [T26]) from a folder in the hub layout or by hub name.
* :func:`gcide_retrieval` -- a held-out retrieval task built from the GNU Collaborative
  International Dictionary of English (Debian's ``dict-gcide``): queries are quoted usage
  examples with the headword masked, the relevant document is the definition they illustrate.

The PII corpus is in :mod:`~privembed.evaluation.pii_corpus`, the MTEB tasks in
:mod:`~privembed.evaluation.mteb` and the GCIDE task in :mod:`~privembed.evaluation.gcide`; every
name above is importable from here.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). App. D (STS), Table 6 (retrieval), Table 1 (PII leakage).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int
from .gcide import GCIDE_ENV, gcide_retrieval, gcide_split
from .mteb import MTEBSTS, MTEBRetrieval, load_mteb_retrieval, load_mteb_sts
from .pii_corpus import TEMPLATES, PIISentences, pii_sentences, presidio_templates_path
from .utility import STSTask

__all__ = [
    "GCIDE_ENV",
    "MTEBSTS",
    "TEMPLATES",
    "LeeCorpus",
    "MTEBRetrieval",
    "PIISentences",
    "WordPairs",
    "gcide_retrieval",
    "gcide_split",
    "gensim_data_dir",
    "lee_background",
    "lee_corpus",
    "load_mteb_retrieval",
    "load_mteb_sts",
    "pii_sentences",
    "presidio_templates_path",
    "word_similarity",
]


# ---------------------------------------------------------------------------------------------
# gensim's bundled test data
# ---------------------------------------------------------------------------------------------


def gensim_data_dir() -> Path:
    """gensim's bundled ``test_data`` folder (Lee corpus, WordSim353, SimLex-999)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "gensim is required for the bundled Lee corpus and word-similarity data but not "
            "installed; install it with: pip install gensim (or pass path=...)"
        )
    d = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"
    if not d.is_dir():
        raise FileNotFoundError(f"gensim's test data folder is missing: {d}")
    return d


def _data_file(name: str, path: str | Path | None) -> Path:
    p = Path(path) / name if path is not None else gensim_data_dir() / name
    if not p.exists():
        raise FileNotFoundError(f"evaluation data file not found: {p}")
    return p


@dataclass(frozen=True)
class LeeCorpus:
    """The Lee corpus: 50 documents and human similarity of every pair.

    Attributes
    ----------
    documents : list of str
    ids : list of str
    pairs : ndarray of int, shape (1225, 2)
        Document index pairs (i < j), upper triangle in row-major order.
    scores : ndarray of float, shape (1225,)
        Mean human similarity (0..1) of each pair.
    """

    documents: list[str]
    ids: list[str]
    pairs: NDArray[np.int64]
    scores: NDArray[np.float64]

    def sts_task(self) -> STSTask:
        """The pairs as an :class:`~privembed.evaluation.STSTask` over embeddings of ``documents``."""
        return STSTask(self.pairs, self.scores, name="lee")


def lee_corpus(path: str | Path | None = None) -> LeeCorpus:
    """Load the 50 Lee documents (``lee.cor``) and the judgments (``similarities0-1.txt``).

    Parameters
    ----------
    path : folder, optional
        Where the two files are (default: gensim's bundled test data).

    Examples
    --------
    >>> lee = lee_corpus()
    >>> len(lee.documents), lee.pairs.shape, round(float(lee.scores.mean()), 3)
    (50, (1225, 2), 0.327)
    """
    docs = [
        line.strip()
        for line in _data_file("lee.cor", path).read_text(encoding="latin-1").splitlines()
        if line.strip()
    ]
    S = np.loadtxt(_data_file("similarities0-1.txt", path), dtype=np.float64)
    if S.shape != (len(docs), len(docs)):
        raise DataError(
            f"the similarity matrix is {S.shape} but lee.cor has {len(docs)} documents."
        )
    iu = np.triu_indices(len(docs), 1)
    return LeeCorpus(
        documents=docs,
        ids=[f"lee-{i:02d}" for i in range(len(docs))],
        pairs=np.stack(iu, axis=1).astype(np.int64),
        scores=S[iu],
    )


def lee_background(
    path: str | Path | None = None, *, sentences: bool = False, min_words: int = 5
) -> list[str]:
    """The 300 Lee background documents, or their distinct sentences of >= ``min_words`` words.

    Examples
    --------
    >>> len(lee_background()), len(lee_background(sentences=True)) > 2000
    (300, True)
    """
    text = _data_file("lee_background.cor", path).read_text(encoding="latin-1")
    docs = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        return docs
    min_words = check_int("min_words", min_words, ge=1)
    seen: dict[str, None] = {}
    for doc in docs:
        for s in re.split(r"(?<=[.!?])\s+", doc):
            s = s.strip()
            if len(s.split()) >= min_words:
                seen.setdefault(s, None)
    return list(seen)


@dataclass(frozen=True)
class WordPairs:
    """Word pairs with human similarity (WordSim353, SimLex-999)."""

    name: str
    word1: list[str]
    word2: list[str]
    scores: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.word1)

    def sts_task(self, vocabulary: Sequence[str]) -> tuple[STSTask, float]:
        """The pairs whose words are both in ``vocabulary`` (rows of a word-vector matrix).

        Returns the task over those rows and the coverage (share of pairs kept).
        """
        index = {w: i for i, w in enumerate(vocabulary)}
        keep = [
            (index[a], index[b], s)
            for a, b, s in zip(self.word1, self.word2, self.scores, strict=True)
            if a in index and b in index
        ]
        if len(keep) < 2:
            raise DataError(f"fewer than 2 {self.name} pairs are in the vocabulary.")
        pairs = np.array([(a, b) for a, b, _ in keep], dtype=np.int64)
        scores = np.array([s for _, _, s in keep], dtype=np.float64)
        return STSTask(pairs, scores, name=self.name), len(keep) / len(self)


_WORD_FILES = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}


def word_similarity(name: str = "wordsim353", path: str | Path | None = None) -> WordPairs:
    """WordSim353 (``"wordsim353"``) or SimLex-999 (``"simlex999"``), lower-cased.

    Examples
    --------
    >>> ws = word_similarity("wordsim353"); len(ws), ws.word1[0], ws.word2[0], float(ws.scores[0])
    (353, 'love', 'sex', 6.77)
    >>> len(word_similarity("simlex999"))
    999
    """
    if name not in _WORD_FILES:
        raise ValueError(f"name must be one of {sorted(_WORD_FILES)}, got name={name!r}.")
    w1, w2, sc = [], [], []
    for line in _data_file(_WORD_FILES[name], path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise DataError(f"{name}: bad line {line!r} (expected word1<TAB>word2<TAB>score).")
        w1.append(parts[0].strip().lower())
        w2.append(parts[1].strip().lower())
        sc.append(float(parts[2]))
    return WordPairs(name, w1, w2, np.array(sc))
