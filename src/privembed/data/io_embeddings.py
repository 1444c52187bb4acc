"""Whole embeddings files: read into memory (``.npy``, ``.npz``, Parquet, JSONL, with ids and
metadata) and written atomically.

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_embeddings
from .io_atomic import _SIDECAR_FORMAT, atomic_output, sidecar_path
from .io_common import (
    EmbeddingTable,
    _id_array,
    _loads_meta,
    _plain_ids,
    _require_exists,
    detect_format,
)
from .io_jsonl import _write_jsonl, iter_jsonl_batches
from .io_parquet import (
    ROW_GROUP_ROWS,
    _embeddings_table,
    _id_field,
    _list_to_numpy,
    _open_parquet,
    _parquet_columns,
    _parquet_meta,
)


def read_metadata(path: str | Path) -> dict[str, Any]:
    """privembed metadata stored in a file (empty for formats without metadata)."""
    p = Path(path)
    _require_exists(p)
    fmt = detect_format(p)
    if fmt == "parquet":
        return _parquet_meta(_open_parquet(p).schema_arrow, p)
    if fmt == "npz":
        with _load_npz(p) as z:
            return _npz_meta(z, p)
    if fmt == "npy":
        return _sidecar_meta(p)
    return {}


def _sidecar_meta(p: Path) -> dict[str, Any]:
    """Metadata of a ``.npy`` file from its sidecar, if the sidecar belongs to this file."""
    side = sidecar_path(p)
    if not side.exists():
        return {}
    body = _loads_meta(side.read_bytes(), side)
    if body.get("format") != _SIDECAR_FORMAT or body.get("size") != p.stat().st_size:
        return {}  # a sidecar of another file (e.g. the .npy was replaced): not this file's
    meta = body.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _load_npy(p: Path, *, mmap: bool = False) -> NDArray[Any]:
    """A ``.npy`` array (memory-mapped with ``mmap``); a file numpy refuses is a DataError."""
    try:
        return np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as exc:
        raise DataError(f"cannot read {p} as .npy: {str(exc).splitlines()[0]}") from None


@contextlib.contextmanager
def _load_npz(p: Path) -> Iterator[Any]:
    """An open ``.npz`` (our own file handle: closed even when numpy refuses the file)."""
    with p.open("rb") as fh:
        try:
            z = np.load(fh, allow_pickle=False)
        except Exception as exc:
            raise DataError(f"cannot read {p} as .npz: {str(exc).splitlines()[0]}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise DataError(f"cannot read {p} as .npz: it holds a single array (a .npy file?).")
        with z:
            yield z


def _npz_meta(z: Any, where: Path | str = "file") -> dict[str, Any]:
    if "metadata" not in z:
        return {}
    return _loads_meta(str(z["metadata"]), where)


def _npz_ids(z: Any, p: Path) -> list[Any] | None:
    """Record ids of an ``.npz``: a typed ``ids`` array, or ``ids_json`` for mixed types."""
    if "ids_json" in z:
        try:
            ids = json.loads(str(z["ids_json"]))
        except (json.JSONDecodeError, RecursionError):
            raise DataError(f"{p}: ids_json is not a JSON list.") from None
        if not isinstance(ids, list):
            raise DataError(f"{p}: ids_json is not a JSON list.")
        return ids
    if "ids" in z:
        return list(z["ids"].tolist())
    return None


def read_embeddings(
    path: str | Path,
    *,
    column: str | None = None,
    id_column: str | None = None,
    validate: bool = True,
) -> EmbeddingTable:
    """Read a whole embeddings file into memory.

    Raises
    ------
    FileNotFoundError, DataError
        Missing file, unreadable/corrupt file, ragged or non-numeric embeddings, and (with
        ``validate``) NaN/inf/zero rows.
    """
    p = Path(path)
    _require_exists(p)
    fmt = detect_format(p)
    ids: NDArray[Any] | None = None
    meta: dict[str, Any] = {}
    if fmt == "npy":
        X = _load_npy(p)
    elif fmt == "npz":
        with _load_npz(p) as z:
            key = column or "embeddings"
            if key not in z:
                raise DataError(f"{p} has no array {key!r} (arrays: {', '.join(z.files)}).")
            X = z[key]
            npz_ids = _npz_ids(z, p)
            ids = None if npz_ids is None else _id_array(npz_ids)
            meta = _npz_meta(z, p)
    elif fmt == "parquet":
        pf = _open_parquet(p)
        schema = pf.schema_arrow
        col, idc = _parquet_columns(schema, column, id_column, p)
        try:
            table = pf.read(columns=[col] + ([idc] if idc else []))
        except Exception as exc:
            raise DataError(f"cannot read {p}: {str(exc).splitlines()[0]}") from None
        X = _list_to_numpy(table.column(col), col)
        ids = _id_array(table.column(idc).to_pylist()) if idc else None
        meta = _parquet_meta(schema, p)
    else:  # JSONL: the lines as one batch, checked as a stream checks them
        whole = next(iter_jsonl_batches(p, batch_rows=sys.maxsize), None)
        X = np.empty((0,)) if whole is None else whole.X
        ids = None if whole is None or whole.ids is None else _id_array(whole.ids)
    if X.dtype.kind not in "fiu":
        raise DataError(f"{p}: embeddings must be numeric, got dtype={X.dtype}.")
    if X.ndim != 2:
        raise DataError(f"{p}: embeddings must be a 2-D (n, d) array, got shape {X.shape}.")
    if validate:
        X, _ = check_embeddings(X, name=str(p.name))
    return EmbeddingTable(X=X, ids=ids, metadata=meta)


def read_ids(path: str | Path, *, id_column: str | None = None) -> list[Any] | None:
    """Only the record ids of an embeddings file (Parquet reads just the id column)."""
    p = Path(path)
    _require_exists(p)
    if detect_format(p) == "parquet":
        pf = _open_parquet(p)
        idc = _id_field(pf.schema_arrow, id_column, p)
        if idc is None:
            return None
        return list(pf.read(columns=[idc]).column(idc).to_pylist())
    t = read_embeddings(p, id_column=id_column, validate=False)
    return None if t.ids is None else list(t.ids)


def write_embeddings(
    path: str | Path,
    X: NDArray[Any],
    *,
    ids: Any = None,
    metadata: dict[str, Any] | None = None,
    extra: Any = None,
    src: str | Path | None = None,
    commit: Callable[[], object] | None = None,
    overwrite: bool = True,
) -> Path:
    """Atomically write embeddings (and ids, metadata, extra Parquet columns) to ``path``.

    ``commit`` runs just before the output is published (see :func:`atomic_output`); a
    ``.npy`` output gets its metadata in a sidecar (:func:`sidecar_path`).
    """
    p = Path(path)
    fmt = detect_format(p)
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"embeddings must be 2-D (n, d), got shape {X.shape}.")
    if ids is not None and len(ids) != X.shape[0]:
        raise DataError(f"ids has {len(ids)} entries but there are {X.shape[0]} embeddings.")
    meta = dict(metadata or {})
    id_list = None if ids is None else _plain_ids(ids)
    side = (lambda _tmp: meta) if fmt == "npy" and meta else None
    with atomic_output(p, src=src, commit=commit, sidecar=side, overwrite=overwrite) as tmp:
        if fmt == "npy":
            with tmp.open("wb") as fh:
                np.save(fh, X)
        elif fmt == "parquet":
            pq = require("pyarrow.parquet", "io")
            table = _embeddings_table(X, id_list, extra, meta)
            pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)
        else:
            _write_plain(tmp, fmt, X, id_list, meta, extra=extra)
    return p


def _write_plain(
    tmp: Path, fmt: str, X: NDArray[Any], ids: Any, meta: dict[str, Any], *, extra: Any = None
) -> None:
    """``.npz`` or JSONL; JSONL lines also carry ``extra``'s columns (a pyarrow table)."""
    if fmt == "jsonl":
        _write_jsonl(tmp, X, ids, extra)
        return
    arrays: dict[str, Any] = {"embeddings": X, "metadata": np.array(json.dumps(meta))}
    if ids is not None:
        kinds = {type(x) for x in ids}
        if kinds <= {int} or kinds <= {str}:
            arrays["ids"] = np.asarray(ids)
        else:  # mixed types: a numpy array would turn every id into a string
            arrays["ids_json"] = np.array(json.dumps(list(ids)))
    with tmp.open("wb") as fh:
        np.savez(fh, **arrays)
