"""Parquet embeddings: the embedding and id columns of a schema, float-list columns to and from
numpy, the privembed metadata under the schema key ``privembed``, typed id columns.

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError
from .io_common import _loads_meta

META_KEY = b"privembed"
#: rows per Parquet row group we write (readers then stream in bounded memory)
ROW_GROUP_ROWS = 16384


def _pa() -> Any:
    return require("pyarrow", "io", purpose="Parquet files")


def preload(*paths: str | Path) -> None:
    """Import now what reading or writing these files will import lazily (pyarrow, and the
    pandas that pyarrow loads on first use), so that no import runs once an output is open."""
    if any(Path(p).suffix.lower() == ".parquet" for p in paths):
        pa = _pa()
        with contextlib.suppress(ImportError):
            import pandas  # noqa: F401 - pyarrow imports it lazily in the first batch otherwise
        pa.table({"x": [1]}).to_pylist()


def _embedding_column(schema: Any, column: str | None, path: Path) -> str:
    pa = _pa()
    if column is not None:
        if column not in schema.names:
            raise DataError(
                f"{path} has no column {column!r} (columns: {', '.join(schema.names)})."
            )
        return column
    if "embedding" in schema.names:
        return "embedding"
    cands = [
        f.name
        for f in schema
        if (
            pa.types.is_list(f.type)
            or pa.types.is_fixed_size_list(f.type)
            or pa.types.is_large_list(f.type)
        )
        and pa.types.is_floating(f.type.value_type)
    ]
    if len(cands) != 1:
        raise DataError(
            f"{path}: cannot tell which column holds the embeddings "
            f"(float list columns: {cands or 'none'}); pass the column name."
        )
    return str(cands[0])


def _list_to_numpy(arr: Any, name: str) -> NDArray[Any]:
    pa = _pa()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.null_count:
        raise DataError(f"column {name!r} has {arr.null_count} null embedding(s).")
    if pa.types.is_fixed_size_list(arr.type):
        d = arr.type.list_size
        values = arr.flatten()
    else:
        lengths = np.asarray(arr.value_lengths())
        if lengths.size and (lengths != lengths[0]).any():
            bad = int(np.flatnonzero(lengths != lengths[0])[0])
            raise DataError(
                f"column {name!r} has embeddings of different lengths "
                f"(row 0 has {lengths[0]}, row {bad} has {lengths[bad]}): dimension mismatch."
            )
        d = int(lengths[0]) if lengths.size else 0
        values = arr.flatten()
    if values.null_count:
        raise DataError(f"column {name!r} has null values inside embeddings.")
    flat = values.to_numpy(zero_copy_only=False)
    if flat.dtype not in (np.float32, np.float64):
        flat = flat.astype(np.float64)
    return flat.reshape(len(arr), d)


def _numpy_to_list(X: NDArray[Any]) -> Any:
    pa = _pa()
    d = X.shape[1]
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(X).ravel()), d)


def _parquet_meta(schema: Any, where: Path | str = "file") -> dict[str, Any]:
    raw = (schema.metadata or {}).get(META_KEY)
    if not raw:
        return {}
    return _loads_meta(raw, where)


def _open_parquet(path: Path) -> Any:
    pq = require("pyarrow.parquet", "io", purpose="Parquet files")
    try:
        # no pre-buffering and a small read buffer: streaming stays bounded by the batch size
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"cannot read {path} as Parquet: {str(exc).splitlines()[0]}") from None


def _id_field(schema: Any, id_column: str | None, path: Path) -> str | None:
    """The id column: the one named, else ``id`` when there is one, else None."""
    idc = id_column or ("id" if "id" in schema.names else None)
    if idc and idc not in schema.names:
        raise DataError(f"{path} has no id column {idc!r}.")
    return idc


def _parquet_columns(
    schema: Any, column: str | None, id_column: str | None, path: Path
) -> tuple[str, str | None]:
    """The embedding column and the id column (or None) of a Parquet schema."""
    return _embedding_column(schema, column, path), _id_field(schema, id_column, path)


def _id_column(pa: Any, ids: list[Any]) -> Any:
    kinds = {type(x) for x in ids}
    if len(kinds) > 1:
        raise DataError(
            "ids mix types ("
            + ", ".join(sorted(k.__name__ for k in kinds))
            + "); a Parquet id column holds one type -- write .jsonl or .npz, or make the ids "
            "one type."
        )
    return pa.array(ids)


def _embeddings_table(
    X: NDArray[Any],
    ids: list[Any] | None,
    extra: Any,
    meta: dict[str, Any],
    *,
    keep: Sequence[str] | None = None,
) -> Any:
    """A Parquet table of embeddings: ``id`` (when ``ids`` are given), the columns of ``extra``
    (a pyarrow table or None) that ``keep`` names (None: all but ``id`` and ``embedding``), then
    ``embedding``; ``meta`` under the schema key ``privembed``."""
    pa = _pa()
    cols: dict[str, Any] = {}
    if ids is not None:
        cols["id"] = _id_column(pa, ids)
    if extra is not None:
        names = [c for c in extra.column_names if c not in ("id", "embedding")]
        for name in names if keep is None else keep:
            cols[name] = extra.column(name)
    cols["embedding"] = _numpy_to_list(X)
    return pa.table(cols).replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
