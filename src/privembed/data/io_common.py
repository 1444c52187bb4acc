"""What every embeddings reader and writer shares: the formats by suffix, the tables they read,
typed ids, and JSON parsed with a one-line error.

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError

FORMATS = {
    ".npy": "npy",
    ".npz": "npz",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
#: files of texts, by suffix (:func:`privembed.data.io.read_text_table`)
TEXT_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "txt",
}


def _suffixes(formats: Mapping[str, str]) -> str:
    """The first suffix of each format, as a message lists them (``.npy, .npz, ...``)."""
    first: dict[str, str] = {}
    for suffix, name in formats.items():
        first.setdefault(name, suffix)
    return ", ".join(first.values())


def _format_of(path: str | Path, formats: Mapping[str, str], what: str, listing: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in formats:
        raise ValueError(f"unsupported {what} {suffix!r} for {path} ({listing}).")
    return formats[suffix]


def detect_format(path: str | Path) -> str:
    """Format name from the file suffix.

    Examples
    --------
    >>> detect_format("emb.parquet"), detect_format("x.NPY")
    ('parquet', 'npy')
    >>> detect_format("emb.csv")
    Traceback (most recent call last):
    ...
    ValueError: unsupported file format '.csv' for emb.csv (use .npy, .npz, .parquet, .jsonl).
    """
    return _format_of(path, FORMATS, "file format", "use " + _suffixes(FORMATS))


def detect_text_format(path: str | Path) -> str:
    """Format name of a file of texts, from its suffix.

    Examples
    --------
    >>> detect_text_format("notes.csv"), detect_text_format("notes.JSONL")
    ('csv', 'jsonl')
    >>> detect_text_format("c.xyz")
    Traceback (most recent call last):
    ...
    ValueError: unsupported text file format '.xyz' for c.xyz (use .jsonl, .csv, .parquet, .txt).
    """
    return _format_of(path, TEXT_FORMATS, "text file format", "use " + _suffixes(TEXT_FORMATS))


def check_input_format(path: str | Path) -> str:
    """Format name of a file that may hold embeddings or texts (commands that take either).

    Examples
    --------
    >>> check_input_format("notes.csv"), check_input_format("emb.npz")
    ('csv', 'npz')
    >>> check_input_format("c.xyz")
    Traceback (most recent call last):
    ...
    ValueError: unsupported file format '.xyz' for c.xyz (embeddings: .npy, .npz, .parquet, .jsonl; texts: .jsonl, .csv, .parquet, .txt).
    """
    listing = f"embeddings: {_suffixes(FORMATS)}; texts: {_suffixes(TEXT_FORMATS)}"
    return _format_of(path, {**TEXT_FORMATS, **FORMATS}, "file format", listing)


def _require_exists(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    if path.is_dir():
        raise IsADirectoryError(f"expected a file, got a directory: {path}")


def parse_json(raw: str | bytes, where: Path | str) -> Any:
    """``raw`` parsed as JSON; bad or too deeply nested JSON is a one-line :class:`DataError`
    that names ``where`` (a file, or ``file:line``).

    Examples
    --------
    >>> parse_json('{"a": [1]}', "x.json")
    {'a': [1]}
    >>> parse_json("[" * 100_000, "x.jsonl:3")
    Traceback (most recent call last):
    ...
    privembed.core._validation.DataError: x.jsonl:3: JSON nested too deeply.
    """
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: invalid JSON ({exc.msg}).") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply.") from None


def _loads_meta(raw: str | bytes, where: Path | str) -> dict[str, Any]:
    """privembed metadata: a JSON object, else nothing (a file of another tool); too deeply
    nested is refused."""
    try:
        out = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    except RecursionError:
        raise DataError(f"{where}: privembed metadata is nested too deeply to read.") from None
    return out if isinstance(out, dict) else {}


@dataclass
class EmbeddingTable:
    """Embeddings with optional ids and file metadata."""

    X: NDArray[Any]
    ids: NDArray[Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def dim(self) -> int:
        return int(self.X.shape[1])


@dataclass
class Batch:
    """One block of rows: embeddings, ids (or None) and the other Parquet columns (or None)."""

    X: NDArray[Any]
    ids: list[Any] | None
    extra: Any
    start: int

    @property
    def num_rows(self) -> int:
        return int(self.X.shape[0])


def _id_array(ids: list[Any]) -> NDArray[Any]:
    """Ids as a 1-D object array that keeps each id's own type (never coerced to strings)."""
    out = np.empty(len(ids), dtype=object)
    out[:] = ids
    return out


def _plain_ids(ids: Any) -> list[Any]:
    """Ids as a list of Python ints and strings (each keeps its own type)."""
    return [x.item() if isinstance(x, np.generic) else x for x in list(ids)]


def _id_presence(p: Path, lineno: int, obj: dict[str, Any], key: str, with_id: bool | None) -> bool:
    """Whether line ``lineno`` of ``p`` has the id field ``key``, refusing a file whose lines
    have ids and lack them by turns (``with_id``: what the lines before said, None at first)."""
    has = key in obj
    if with_id is not None and has != with_id:
        if with_id:
            raise DataError(f"{p}:{lineno}: missing {key!r} (other lines have ids).")
        raise DataError(f"{p}: some lines have an {key!r} and others do not.")
    return has
