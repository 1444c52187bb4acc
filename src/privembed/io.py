"""Embeddings files: ``.npy``, ``.npz``, Parquet and JSONL, with atomic writes and streaming.

Formats (chosen by suffix):

* ``.npy`` -- one (n, d) float array; no ids, no metadata.
* ``.npz`` -- arrays ``embeddings`` (n, d), optional ``ids`` (n,), and ``metadata`` (a JSON string).
* ``.parquet`` / ``.pq`` -- an id column (default ``id``) and a list or fixed-size-list float column
  (default ``embedding``, else the only such column); other columns are kept through
  :func:`transform_file`; metadata is stored as JSON under the schema key ``privembed``.
* ``.jsonl`` / ``.ndjson`` -- one object per line: ``{"id": ..., "text": ...}`` for texts
  (:func:`read_texts`) or ``{"id": ..., "embedding": [...]}`` for embeddings.

Writes are atomic: data goes to a temporary file in the destination's folder, which is renamed
over the destination only after everything succeeded, so a failure leaves no partial output, and
the input file is never opened for writing (an output path equal to the input is refused).
Parquet and ``.npy`` inputs are processed in bounded-memory batches by :func:`transform_file`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._optional import require
from ._validation import DataError, check_embeddings

__all__ = [
    "EmbeddingTable",
    "atomic_output",
    "detect_format",
    "iter_batches",
    "read_embeddings",
    "read_ids",
    "read_metadata",
    "read_texts",
    "transform_file",
    "write_embeddings",
]

FORMATS = {
    ".npy": "npy",
    ".npz": "npz",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
META_KEY = b"privembed"
#: rows per Parquet row group we write (readers then stream in bounded memory)
ROW_GROUP_ROWS = 16384


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
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"unsupported file format {suffix!r} for {path} (use .npy, .npz, .parquet, .jsonl)."
        )
    return FORMATS[suffix]


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


def _pa() -> Any:
    return require("pyarrow", "io", purpose="Parquet files")


def _require_exists(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    if path.is_dir():
        raise IsADirectoryError(f"expected a file, got a directory: {path}")


# ---------------------------------------------------------------------------------------------
# atomic writes
# ---------------------------------------------------------------------------------------------


def _default_mode(dst: Path) -> int:
    """Mode for a new output: the existing file's, else 0o666 minus the umask (not mkstemp's 0o600)."""
    if dst.exists():
        return dst.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(dst: str | Path, *, src: str | Path | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``dst``; rename it to ``dst`` on success, delete on error.

    Refuses ``dst`` equal to ``src`` (the input is never touched).
    """
    dst = Path(dst)
    if src is not None and Path(src).resolve() == dst.resolve():
        raise ValueError(f"output must differ from the input, got output={str(dst)!r}.")
    if dst.is_dir():
        raise IsADirectoryError(f"output is a directory: {dst}")
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.exists():
        raise FileNotFoundError(f"output folder does not exist: {parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, _default_mode(dst))
        os.replace(tmp_path, dst)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


# ---------------------------------------------------------------------------------------------
# Parquet helpers
# ---------------------------------------------------------------------------------------------


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


def _parquet_meta(schema: Any) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(META_KEY)
    if not raw:
        return {}
    try:
        out = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}


def _open_parquet(path: Path) -> Any:
    pq = require("pyarrow.parquet", "io", purpose="Parquet files")
    try:
        # no pre-buffering and a small read buffer: streaming stays bounded by the batch size
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"cannot read {path} as Parquet: {str(exc).splitlines()[0]}") from None


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------


def read_metadata(path: str | Path) -> dict[str, Any]:
    """privembed metadata stored in a file (empty for formats without metadata)."""
    p = Path(path)
    _require_exists(p)
    fmt = detect_format(p)
    if fmt == "parquet":
        return _parquet_meta(_open_parquet(p).schema_arrow)
    if fmt == "npz":
        with _load_npz(p) as z:
            return _npz_meta(z)
    return {}


def _load_npz(p: Path) -> Any:
    try:
        return np.load(p, allow_pickle=False)
    except Exception as exc:
        raise DataError(f"cannot read {p} as .npz: {str(exc).splitlines()[0]}") from None


def _npz_meta(z: Any) -> dict[str, Any]:
    if "metadata" not in z:
        return {}
    try:
        out = json.loads(str(z["metadata"]))
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}


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
        try:
            X = np.load(p, allow_pickle=False)
        except Exception as exc:
            raise DataError(f"cannot read {p} as .npy: {str(exc).splitlines()[0]}") from None
    elif fmt == "npz":
        with _load_npz(p) as z:
            key = column or "embeddings"
            if key not in z:
                raise DataError(f"{p} has no array {key!r} (arrays: {', '.join(z.files)}).")
            X = z[key]
            ids = z["ids"] if "ids" in z else None
            meta = _npz_meta(z)
    elif fmt == "parquet":
        pf = _open_parquet(p)
        schema = pf.schema_arrow
        col = _embedding_column(schema, column, p)
        idc = id_column or ("id" if "id" in schema.names else None)
        cols = [col] + ([idc] if idc else [])
        if idc and idc not in schema.names:
            raise DataError(f"{p} has no id column {idc!r}.")
        try:
            table = pf.read(columns=cols)
        except Exception as exc:
            raise DataError(f"cannot read {p}: {str(exc).splitlines()[0]}") from None
        X = _list_to_numpy(table.column(col), col)
        ids = table.column(idc).to_numpy(zero_copy_only=False) if idc else None
        meta = _parquet_meta(schema)
    else:
        ids_list: list[Any] = []
        rows: list[Any] = []
        for lineno, obj in _iter_jsonl(p):
            if "embedding" not in obj:
                raise DataError(
                    f"{p}:{lineno}: missing 'embedding' (is this a text file? embed it first)."
                )
            ids_list.append(obj.get("id", lineno - 1))
            rows.append(obj["embedding"])
        try:
            X = np.asarray(rows, dtype=np.float64)
        except ValueError:
            raise DataError(
                f"{p}: embeddings have different lengths (dimension mismatch)."
            ) from None
        ids = np.asarray(ids_list)
    if X.dtype.kind not in "fiu":
        raise DataError(f"{p}: embeddings must be numeric, got dtype={X.dtype}.")
    if X.ndim != 2:
        raise DataError(f"{p}: embeddings must be a 2-D (n, d) array, got shape {X.shape}.")
    if validate:
        X, _ = check_embeddings(X, name=str(p.name))
    return EmbeddingTable(X=X, ids=ids, metadata=meta)


def _iter_jsonl(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with p.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{p}:{lineno}: invalid JSON ({exc.msg}).") from None
            if not isinstance(obj, dict):
                raise DataError(f"{p}:{lineno}: each line must be a JSON object.")
            yield lineno, obj


def read_ids(path: str | Path, *, id_column: str | None = None) -> list[Any] | None:
    """Only the record ids of an embeddings file (Parquet reads just the id column)."""
    p = Path(path)
    _require_exists(p)
    if detect_format(p) == "parquet":
        pf = _open_parquet(p)
        idc = id_column or ("id" if "id" in pf.schema_arrow.names else None)
        if idc is None:
            return None
        if idc not in pf.schema_arrow.names:
            raise DataError(f"{p} has no id column {idc!r}.")
        return list(pf.read(columns=[idc]).column(idc).to_pylist())
    t = read_embeddings(p, id_column=id_column, validate=False)
    return None if t.ids is None else list(t.ids.tolist())


def read_texts(
    path: str | Path, *, text_key: str = "text", id_key: str = "id"
) -> tuple[list[Any], list[str]]:
    """Read ``{"id": ..., "text": ...}`` lines; ids default to the line index.

    Also accepts a plain ``.txt`` file (one text per line, ids 0..n-1).
    """
    p = Path(path)
    _require_exists(p)
    if p.suffix.lower() == ".txt":
        texts = [ln.rstrip("\n") for ln in p.open(encoding="utf-8") if ln.strip()]
        if not texts:
            raise DataError(f"{p} contains no text.")
        return list(range(len(texts))), texts
    if detect_format(p) != "jsonl":
        raise ValueError(f"texts must be a .jsonl or .txt file, got {p}.")
    ids: list[Any] = []
    texts = []
    for lineno, obj in _iter_jsonl(p):
        t = obj.get(text_key)
        if not isinstance(t, str) or not t.strip():
            raise DataError(f"{p}:{lineno}: missing or empty {text_key!r} string.")
        ids.append(obj.get(id_key, len(ids)))
        texts.append(t)
    if not texts:
        raise DataError(f"{p} contains no texts.")
    if len(set(map(str, ids))) != len(ids):
        raise DataError(f"{p}: ids are not unique.")
    return ids, texts


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------


def write_embeddings(
    path: str | Path,
    X: NDArray[Any],
    *,
    ids: Any = None,
    metadata: dict[str, Any] | None = None,
    extra: Any = None,
    src: str | Path | None = None,
) -> Path:
    """Atomically write embeddings (and ids, metadata, extra Parquet columns) to ``path``."""
    p = Path(path)
    fmt = detect_format(p)
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"embeddings must be 2-D (n, d), got shape {X.shape}.")
    if ids is not None and len(ids) != X.shape[0]:
        raise DataError(f"ids has {len(ids)} entries but there are {X.shape[0]} embeddings.")
    meta = dict(metadata or {})
    with atomic_output(p, src=src) as tmp:
        if fmt == "npy":
            with tmp.open("wb") as fh:
                np.save(fh, X)
        elif fmt == "parquet":
            pa = _pa()
            pq = require("pyarrow.parquet", "io")
            cols: dict[str, Any] = {}
            if ids is not None:
                cols["id"] = pa.array(np.asarray(ids).tolist())
            if extra is not None:
                for name in extra.column_names:
                    if name not in ("id", "embedding"):
                        cols[name] = extra.column(name)
            cols["embedding"] = _numpy_to_list(X)
            table = pa.table(cols)
            table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
            pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)
        else:
            _write_plain(tmp, fmt, X, None if ids is None else np.asarray(ids).tolist(), meta)
    return p


# ---------------------------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One block of rows: embeddings, ids (or None) and the other Parquet columns (or None)."""

    X: NDArray[Any]
    ids: NDArray[Any] | None
    extra: Any
    start: int

    @property
    def num_rows(self) -> int:
        return int(self.X.shape[0])


def iter_batches(
    path: str | Path,
    *,
    batch_rows: int = 16384,
    column: str | None = None,
    id_column: str | None = None,
) -> tuple[int, int, dict[str, Any], Iterator[Batch]]:
    """Open ``path`` for bounded-memory reading.

    Returns ``(n_rows, dim, metadata, batches)``. Parquet streams record batches; ``.npy`` is
    memory-mapped; ``.npz`` and JSONL are read whole (they are not streamable formats).
    """
    p = Path(path)
    _require_exists(p)
    fmt = detect_format(p)
    if fmt == "parquet":
        pf = _open_parquet(p)
        schema = pf.schema_arrow
        col = _embedding_column(schema, column, p)
        idc = id_column or ("id" if "id" in schema.names else None)
        if idc and idc not in schema.names:
            raise DataError(f"{p} has no id column {idc!r}.")
        n = pf.metadata.num_rows
        first = pf.schema_arrow.field(col).type
        dim = first.list_size if hasattr(first, "list_size") and first.list_size > 0 else -1

        def gen_pq() -> Iterator[Batch]:
            start = 0
            try:
                for rb in pf.iter_batches(batch_size=batch_rows):
                    X = _list_to_numpy(rb.column(col), col)
                    ids = rb.column(idc).to_numpy(zero_copy_only=False) if idc else None
                    others = [c for c in rb.schema.names if c not in (col, idc)]
                    extra = rb.select(others) if others else None
                    yield Batch(X, ids, extra, start)
                    start += X.shape[0]
            except DataError:
                raise
            except OSError as exc:
                raise DataError(f"cannot read {p}: {str(exc).splitlines()[0]}") from None

        return n, dim, _parquet_meta(schema), gen_pq()
    if fmt == "npy":
        try:
            arr = np.load(p, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            raise DataError(f"cannot read {p} as .npy: {str(exc).splitlines()[0]}") from None
        if arr.ndim != 2:
            raise DataError(f"{p}: embeddings must be a 2-D (n, d) array, got shape {arr.shape}.")

        def gen_npy() -> Iterator[Batch]:
            for s in range(0, arr.shape[0], batch_rows):
                yield Batch(np.array(arr[s : s + batch_rows]), None, None, s)

        return int(arr.shape[0]), int(arr.shape[1]), {}, gen_npy()
    table = read_embeddings(p, column=column, id_column=id_column, validate=False)

    def gen_mem() -> Iterator[Batch]:
        for s in range(0, table.n, batch_rows):
            ids = None if table.ids is None else table.ids[s : s + batch_rows]
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
) -> dict[str, Any]:
    """Stream ``src`` through ``fn`` (one :class:`Batch` in, an (m, k) array out) into ``dst``.

    Memory is bounded by ``batch_rows`` for Parquet and ``.npy`` inputs. Other Parquet columns
    and the id column are carried through. The output is written atomically; if ``fn`` raises
    on any batch, nothing is left at ``dst``.

    ``on_start(n_rows)`` and ``on_batch(rows_done)`` report progress.
    Returns a summary dict (rows, dim_in, dim_out, metadata written).
    """
    n, dim, meta_in, batches = iter_batches(
        src, batch_rows=batch_rows, column=column, id_column=id_column
    )
    meta_out = metadata(meta_in) if callable(metadata) else dict(metadata or meta_in)
    if on_start:
        on_start(n)
    out_fmt = detect_format(dst)
    rows = 0
    dim_out: int | None = None
    with atomic_output(dst, src=src) as tmp:
        if out_fmt == "parquet":
            pa = _pa()
            pq = require("pyarrow.parquet", "io")
            writer = None
            try:
                for b in batches:
                    Y = fn(b)
                    dim_out = Y.shape[1]
                    cols: dict[str, Any] = {}
                    if b.ids is not None:
                        cols["id"] = pa.array(b.ids.tolist() if b.ids.dtype == object else b.ids)
                    if b.extra is not None:
                        for name in b.extra.schema.names:
                            cols[name] = b.extra.column(name)
                    cols["embedding"] = _numpy_to_list(Y)
                    tbl = pa.table(cols)
                    if writer is None:
                        schema = tbl.schema.with_metadata({META_KEY: json.dumps(meta_out).encode()})
                        writer = pq.ParquetWriter(tmp, schema)
                    writer.write_table(
                        tbl.replace_schema_metadata(writer.schema.metadata),
                        row_group_size=ROW_GROUP_ROWS,
                    )
                    rows += Y.shape[0]
                    if on_batch:
                        on_batch(Y.shape[0])
            finally:
                if writer is not None:
                    writer.close()
        elif out_fmt == "npy":
            out = None
            for b in batches:
                Y = fn(b)
                if out is None:
                    dim_out = Y.shape[1]
                    out = np.lib.format.open_memmap(
                        tmp, mode="w+", dtype=Y.dtype, shape=(n, Y.shape[1])
                    )
                out[b.start : b.start + Y.shape[0]] = Y
                rows += Y.shape[0]
                if on_batch:
                    on_batch(Y.shape[0])
            if out is not None:
                out.flush()
                del out
        else:
            parts: list[NDArray[Any]] = []
            id_parts: list[Any] = []
            for b in batches:
                Y = fn(b)
                parts.append(Y)
                if b.ids is not None:
                    id_parts.extend(b.ids.tolist())
                rows += Y.shape[0]
                if on_batch:
                    on_batch(Y.shape[0])
            if not parts:
                raise DataError(f"{src} contains no rows.")
            Yall = np.concatenate(parts)
            dim_out = Yall.shape[1]
            _write_plain(tmp, out_fmt, Yall, id_parts or None, meta_out)
        if rows == 0:
            raise DataError(f"{src} contains no rows.")
    return {"rows": rows, "dim_in": dim, "dim_out": dim_out, "metadata": meta_out}


def _write_plain(tmp: Path, fmt: str, X: NDArray[Any], ids: Any, meta: dict[str, Any]) -> None:
    if fmt == "npz":
        arrays: dict[str, Any] = {"embeddings": X, "metadata": np.array(json.dumps(meta))}
        if ids is not None:
            arrays["ids"] = np.asarray(ids)
        with tmp.open("wb") as fh:
            np.savez(fh, **arrays)
    else:  # jsonl
        with tmp.open("w", encoding="utf-8") as fh:
            id_list = list(range(X.shape[0])) if ids is None else list(ids)
            for i, row in zip(id_list, X.tolist(), strict=True):
                fh.write(json.dumps({"id": i, "embedding": row}) + "\n")
