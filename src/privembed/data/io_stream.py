"""Embeddings files in bounded memory: read in batches (Parquet record batches, a memory-mapped
``.npy``, JSONL checked then read a batch at a time), streamed through a function into an atomic
output, and summarised (``privembed info``).

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError
from ..core.cancel import checkpoint
from .io_atomic import atomic_output
from .io_common import Batch, _plain_ids, _require_exists, detect_format
from .io_embeddings import _load_npy, _sidecar_meta, _write_plain, read_embeddings
from .io_jsonl import _check_jsonl, iter_jsonl_batches
from .io_parquet import (
    ROW_GROUP_ROWS,
    _embeddings_table,
    _list_to_numpy,
    _open_parquet,
    _parquet_columns,
    _parquet_meta,
)


def _checked(batches: Iterator[Batch]) -> Iterator[Batch]:
    """The batches of a release, with a cancellation checkpoint after each is read."""
    for b in batches:
        checkpoint("batch.read")
        yield b


def iter_batches(
    path: str | Path,
    *,
    batch_rows: int = 16384,
    column: str | None = None,
    id_column: str | None = None,
) -> tuple[int, int, dict[str, Any], Iterator[Batch]]:
    """Open ``path`` for bounded-memory reading.

    Returns ``(n_rows, dim, metadata, batches)``. Parquet streams record batches; ``.npy`` is
    memory-mapped; JSONL is checked in one pass that keeps nothing (every line's JSON, its
    ``embedding`` and length, ids on every line or none) and read ``batch_rows`` lines at a
    time in a second (:func:`iter_jsonl_batches`); ``.npz`` is read whole (a zip member cannot
    be memory-mapped).
    """
    p = Path(path)
    _require_exists(p)
    fmt = detect_format(p)
    if fmt == "parquet":
        pf = _open_parquet(p)
        schema = pf.schema_arrow
        col, idc = _parquet_columns(schema, column, id_column, p)
        n = pf.metadata.num_rows
        first = pf.schema_arrow.field(col).type
        dim = first.list_size if hasattr(first, "list_size") and first.list_size > 0 else -1

        def gen_pq() -> Iterator[Batch]:
            start = 0
            try:
                for rb in pf.iter_batches(batch_size=batch_rows):
                    X = _list_to_numpy(rb.column(col), col)
                    ids = rb.column(idc).to_pylist() if idc else None
                    others = [c for c in rb.schema.names if c not in (col, idc)]
                    extra = rb.select(others) if others else None
                    yield Batch(X, ids, extra, start)
                    start += X.shape[0]
            except DataError:
                raise
            except OSError as exc:
                raise DataError(f"cannot read {p}: {str(exc).splitlines()[0]}") from None

        return n, dim, _parquet_meta(schema, p), gen_pq()
    if fmt == "npy":
        arr = _load_npy(p, mmap=True)
        if arr.ndim != 2:
            raise DataError(f"{p}: embeddings must be a 2-D (n, d) array, got shape {arr.shape}.")

        def gen_npy() -> Iterator[Batch]:
            for s in range(0, arr.shape[0], batch_rows):
                yield Batch(np.array(arr[s : s + batch_rows]), None, None, s)

        return int(arr.shape[0]), int(arr.shape[1]), _sidecar_meta(p), gen_npy()
    if fmt == "jsonl":
        n, dim = _check_jsonl(p)
        return n, dim, {}, iter_jsonl_batches(p, batch_rows=batch_rows)
    table = read_embeddings(p, column=column, id_column=id_column, validate=False)

    def gen_mem() -> Iterator[Batch]:
        for s in range(0, table.n, batch_rows):
            ids = None if table.ids is None else list(table.ids[s : s + batch_rows])
            yield Batch(table.X[s : s + batch_rows], ids, None, s)

    return table.n, table.dim, table.metadata, gen_mem()


def transform_file(
    src: str | Path,
    dst: str | Path,
    fn: Callable[[Batch], NDArray[Any]],
    *,
    metadata: Callable[[dict[str, Any]], dict[str, Any]] | dict[str, Any] | None = None,
    batch_rows: int = 16384,
    column: str | None = None,
    id_column: str | None = None,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    commit: Callable[[], object] | None = None,
    overwrite: bool = True,
    keep_columns: Sequence[str] = (),
) -> dict[str, Any]:
    """Stream ``src`` through ``fn`` (one :class:`Batch` in, an (m, k) array out) into ``dst``.

    Memory is bounded by ``batch_rows`` for Parquet and ``.npy`` inputs. The id column is
    carried through; other Parquet columns only when named in ``keep_columns`` (they are not
    protected: a column is released as it is only on request). The output is written
    atomically; if ``fn`` raises on any batch, nothing is left at ``dst``. ``commit`` runs after
    the last batch and before the output is published (:func:`atomic_output`); ``.npy`` outputs
    get a metadata sidecar.

    ``on_start(n_rows)`` and ``on_batch(rows_done)`` report progress.
    Returns a summary dict (rows, dim_in, dim_out, metadata written, ``dropped_columns``).
    """
    kept, dropped = other_columns(src, keep_columns, column=column, id_column=id_column)
    if kept and detect_format(dst) != "parquet":
        raise ValueError(
            f"keeping columns ({', '.join(kept)}) needs a Parquet output, got {Path(dst).name}."
        )
    n, dim, meta_in, raw_batches = iter_batches(
        src, batch_rows=batch_rows, column=column, id_column=id_column
    )
    batches = _checked(raw_batches)
    meta_out = metadata(meta_in) if callable(metadata) else dict(metadata or meta_in)
    if on_start:
        on_start(n)

    def written(k: int) -> None:
        if on_batch:
            on_batch(k)
        checkpoint("batch.written")

    out_fmt = detect_format(dst)
    side = (lambda _tmp: meta_out) if out_fmt == "npy" and meta_out else None
    with atomic_output(dst, src=src, commit=commit, sidecar=side, overwrite=overwrite) as tmp:
        if out_fmt == "parquet":
            rows, dim_out = _write_parquet(tmp, batches, fn, kept, meta_out, written)
        elif out_fmt == "npy":
            rows, dim_out = _write_npy(tmp, batches, fn, n, written)
        else:
            rows, dim_out = _write_whole(tmp, out_fmt, batches, fn, meta_out, written)
        if rows == 0:
            raise DataError(f"{src} contains no rows.")
    return {
        "rows": rows,
        "dim_in": dim,
        "dim_out": dim_out,
        "metadata": meta_out,
        "dropped_columns": dropped,
    }


def _write_parquet(
    tmp: Path,
    batches: Iterator[Batch],
    fn: Callable[[Batch], NDArray[Any]],
    kept: list[str],
    meta: dict[str, Any],
    written: Callable[[int], None],
) -> tuple[int, int | None]:
    """Stream the protected batches into a Parquet file (ids and kept columns beside them);
    returns (rows, output dimension)."""
    pq = require("pyarrow.parquet", "io")
    writer = None
    rows = 0
    dim_out: int | None = None
    try:
        for b in batches:
            Y = fn(b)
            dim_out = Y.shape[1]
            ids = None if b.ids is None else _plain_ids(b.ids)
            tbl = _embeddings_table(Y, ids, b.extra, meta, keep=kept)
            if writer is None:
                writer = pq.ParquetWriter(tmp, tbl.schema)
            writer.write_table(tbl, row_group_size=ROW_GROUP_ROWS)
            rows += Y.shape[0]
            written(Y.shape[0])
    finally:
        if writer is not None:
            writer.close()
    return rows, dim_out


def _write_npy(
    tmp: Path,
    batches: Iterator[Batch],
    fn: Callable[[Batch], NDArray[Any]],
    n: int,
    written: Callable[[int], None],
) -> tuple[int, int | None]:
    """Write the protected batches into a memory-mapped ``.npy`` of ``n`` rows; returns (rows,
    output dimension)."""
    out = None
    rows = 0
    dim_out: int | None = None
    for b in batches:
        Y = fn(b)
        if out is None:
            dim_out = Y.shape[1]
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=Y.dtype, shape=(n, Y.shape[1]))
        out[b.start : b.start + Y.shape[0]] = Y
        rows += Y.shape[0]
        written(Y.shape[0])
    if out is not None:
        out.flush()
        del out
    return rows, dim_out


def _write_whole(
    tmp: Path,
    fmt: str,
    batches: Iterator[Batch],
    fn: Callable[[Batch], NDArray[Any]],
    meta: dict[str, Any],
    written: Callable[[int], None],
) -> tuple[int, int | None]:
    """Collect the protected batches and write them at once (``.npz`` or JSONL); returns (rows,
    output dimension), and writes nothing when there are no rows."""
    parts: list[NDArray[Any]] = []
    id_parts: list[Any] = []
    rows = 0
    for b in batches:
        Y = fn(b)
        parts.append(Y)
        if b.ids is not None:
            id_parts.extend(_plain_ids(b.ids))
        rows += Y.shape[0]
        written(Y.shape[0])
    if not parts:
        return 0, None
    Yall = np.concatenate(parts)
    _write_plain(tmp, fmt, Yall, id_parts or None, meta)
    return rows, Yall.shape[1]


def other_columns(
    src: str | Path,
    keep: Sequence[str] = (),
    *,
    column: str | None = None,
    id_column: str | None = None,
) -> tuple[list[str], list[str]]:
    """The columns of ``src`` besides its embeddings and ids, split into those ``keep`` names
    and the rest (``(kept, dropped)``, in file order).

    Raises
    ------
    privembed.DataError
        ``keep`` names a column ``src`` does not have (or is the embedding or id column).
    """
    keep = list(dict.fromkeys(str(k) for k in keep))
    names: list[str] = []
    p = Path(src)
    if detect_format(p) == "parquet" and p.exists():
        schema = _open_parquet(p).schema_arrow
        col, idc = _parquet_columns(schema, column, id_column, p)
        names = [c for c in schema.names if c not in (col, idc)]
    missing = [k for k in keep if k not in names]
    if missing:
        have = ", ".join(names) if names else "none"
        raise DataError(
            f"{p.name} has no column {missing[0]!r} to keep (its other columns: {have})."
        )
    return [c for c in names if c in keep], [c for c in names if c not in keep]


def describe_file(path: str | Path, *, column: str | None = None) -> dict[str, Any]:
    """What an embeddings file holds (``privembed info``), read in bounded-memory batches: rows,
    dimension, dtype, whether it has ids, the l2 norms of its finite rows (min, mean, max), how
    many rows are not finite or are zero, and its metadata (the protection, for a release).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "x.npy"
    >>> np.save(f, np.array([[3.0, 4.0], [0.0, 0.0], [np.nan, 1.0]]))
    >>> r = describe_file(f)
    >>> (r["rows"], r["dim"], r["norm_max"], r["zero_rows"], r["nonfinite_rows"])
    (3, 2, 5.0, 1, 1)
    """
    _n, dim, meta, batches = iter_batches(path, column=column)
    norms_min, norms_max, norms_sum = math.inf, 0.0, 0.0
    bad = zero = rows = 0
    dtype: str | None = None
    has_ids = False
    for b in batches:
        X = np.asarray(b.X, dtype=np.float64)
        dtype = dtype or str(b.X.dtype)
        has_ids = has_ids or b.ids is not None
        finite = np.isfinite(X).all(axis=1)
        bad += int((~finite).sum())
        nr = np.linalg.norm(X[finite], axis=1)
        zero += int((nr == 0).sum())
        if nr.size:
            norms_min, norms_max = min(norms_min, float(nr.min())), max(norms_max, float(nr.max()))
            norms_sum += float(nr.sum())
        rows += X.shape[0]
        dim = X.shape[1]
    good = rows - bad
    return {
        "file": str(path),
        "rows": rows,
        "dim": dim,
        "dtype": dtype,
        "ids": has_ids,
        "norm_min": norms_min if good else None,
        "norm_mean": norms_sum / good if good else None,
        "norm_max": norms_max if good else None,
        "nonfinite_rows": bad,
        "zero_rows": zero,
        "metadata": meta,
    }
