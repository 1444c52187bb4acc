"""JSONL files: one JSON value a line, read with a one-line error naming the line (invalid or
too deeply nested JSON); embeddings lines ``{"id": ..., "embedding": [...]}`` checked, streamed
in batches and written.

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_int
from .io_common import Batch, _id_presence, parse_json


def iter_json_lines(path: str | Path) -> Generator[tuple[int, Any], None, None]:
    """``(line number, value)`` for each non-blank line of a JSONL file, any JSON value.

    Raises
    ------
    privembed.DataError
        A line is not JSON or is nested too deeply to read (``file:line: ...``, one line).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> _ = p.write_text('"flu"\\n\\n{"token": "gout"}\\n' + "[" * 100_000 + "\\n")
    >>> lines = iter_json_lines(p)
    >>> next(lines), next(lines)
    ((1, 'flu'), (3, {'token': 'gout'}))
    >>> next(lines)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    privembed.core._validation.DataError: ...t.jsonl:4: JSON nested too deeply.
    """
    p = Path(path)
    with p.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                yield lineno, parse_json(line, f"{p}:{lineno}")


def _iter_jsonl(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The lines of a JSONL file of records: each must be a JSON object."""
    for lineno, obj in iter_json_lines(p):
        if not isinstance(obj, dict):
            raise DataError(f"{p}:{lineno}: each line must be a JSON object.")
        yield lineno, obj


def _jsonl_row(p: Path, lineno: int, obj: dict[str, Any], with_id: bool | None) -> bool:
    """Check one line of an embeddings JSONL file; whether it has an id."""
    if "embedding" not in obj:
        raise DataError(f"{p}:{lineno}: missing 'embedding' (is this a text file? embed it first).")
    return _id_presence(p, lineno, obj, "id", with_id)


def _check_jsonl(p: Path) -> tuple[int, int]:
    """(rows, dimension) of an embeddings JSONL file, every line checked and none kept: the
    errors :func:`privembed.data.io.read_embeddings` raises, raised before a stream of it
    starts."""
    n, dim, with_id = 0, -1, None
    for lineno, obj in _iter_jsonl(p):
        with_id = _jsonl_row(p, lineno, obj, with_id)
        emb = obj["embedding"]
        if not isinstance(emb, list):
            raise DataError(f"{p}:{lineno}: 'embedding' must be a list of numbers.")
        if dim == -1:
            dim = len(emb)
        if len(emb) != dim:
            raise DataError(f"{p}: embeddings have different lengths (dimension mismatch).")
        n += 1
    if n == 0:
        raise DataError(f"{p}: embeddings must be a 2-D (n, d) array, got shape (0,).")
    return n, dim


def iter_jsonl_batches(path: str | Path, *, batch_rows: int = 16384) -> Iterator[Batch]:
    """The rows of an embeddings JSONL file, ``batch_rows`` lines at a time (float64, as
    :func:`privembed.data.io.read_embeddings` reads them; ids as Python values, or None for a
    file without).

    Only the current batch is held. The lines are checked as they come (:func:`_check_jsonl`
    checks them all before a caller writes anything: :func:`privembed.data.io.iter_batches`).
    """
    p = Path(path)
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    rows: list[Any] = []
    ids: list[Any] = []
    start, with_id = 0, None

    def batch() -> Batch:
        try:
            X = np.asarray(rows, dtype=np.float64)
        except ValueError:
            raise DataError(
                f"{p}: embeddings have different lengths (dimension mismatch)."
            ) from None
        if X.ndim != 2:
            raise DataError(f"{p}: embeddings must be a 2-D (n, d) array, got shape {X.shape}.")
        return Batch(X, list(ids) if with_id else None, None, start)

    for lineno, obj in _iter_jsonl(p):
        with_id = _jsonl_row(p, lineno, obj, with_id)
        rows.append(obj["embedding"])
        ids.append(obj.get("id"))
        if len(rows) == batch_rows:
            yield batch()
            start += len(rows)
            rows, ids = [], []
    if rows:
        yield batch()


def _write_jsonl(tmp: Path, X: NDArray[Any], ids: Any, extra: Any = None) -> None:
    """Embeddings lines (with their ids, and ``extra``'s columns: a pyarrow table)."""
    others: list[dict[str, Any]] = [{}] * X.shape[0]
    if extra is not None:
        keep = [c for c in extra.column_names if c not in ("id", "embedding")]
        others = extra.select(keep).to_pylist()
    with tmp.open("w", encoding="utf-8") as fh:
        if ids is None:
            for row, more in zip(X.tolist(), others, strict=True):
                fh.write(json.dumps({**more, "embedding": row}, default=str) + "\n")
        else:
            for i, row, more in zip(ids, X.tolist(), others, strict=True):
                fh.write(json.dumps({"id": i, **more, "embedding": row}, default=str) + "\n")
