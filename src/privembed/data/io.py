"""Embeddings files: ``.npy``, ``.npz``, Parquet and JSONL, with atomic writes and streaming.

Formats (chosen by suffix):

* ``.npy`` -- one (n, d) float array; no ids, no metadata.
* ``.npz`` -- arrays ``embeddings`` (n, d), optional ``ids`` (n,), and ``metadata`` (a JSON string).
* ``.parquet`` / ``.pq`` -- an id column (default ``id``) and a list or fixed-size-list float column
  (default ``embedding``, else the only such column); other columns are kept through
  :func:`transform_file`; metadata is stored as JSON under the schema key ``privembed``.
* ``.jsonl`` / ``.ndjson`` -- one object per line: ``{"id": ..., "text": ...}`` for texts
  (:func:`read_texts`) or ``{"id": ..., "embedding": [...]}`` for embeddings.

Texts (:func:`read_text_table`, :data:`TEXT_FORMATS`) come from JSONL, CSV (a header row), a
Parquet string column, or a ``.txt`` file (one text per line); the text and id fields are named
by the caller, and every other field or column is kept alongside.

Writes are atomic: data goes to a temporary file in the destination's folder, which is renamed
over the destination only after everything succeeded, so a failure leaves no partial output, and
the input file is never opened for writing (an output path equal to the input is refused).
Parquet and ``.npy`` inputs are processed in bounded-memory batches by :func:`transform_file`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_embeddings, check_int
from ..core.cancel import checkpoint

__all__ = [
    "TEXT_FORMATS",
    "EmbeddingTable",
    "TextTable",
    "atomic_output",
    "check_input_format",
    "describe_file",
    "detect_format",
    "detect_text_format",
    "holds_texts",
    "iter_batches",
    "other_columns",
    "read_embeddings",
    "read_ids",
    "read_metadata",
    "read_text_table",
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
#: files of texts, by suffix (:func:`read_text_table`)
TEXT_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "txt",
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
    suffix = Path(path).suffix.lower()
    if suffix not in TEXT_FORMATS:
        raise ValueError(
            f"unsupported text file format {suffix!r} for {path} (use .jsonl, .csv, .parquet, "
            ".txt)."
        )
    return TEXT_FORMATS[suffix]


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
    suffix = Path(path).suffix.lower()
    if suffix in FORMATS:
        return FORMATS[suffix]
    if suffix in TEXT_FORMATS:
        return TEXT_FORMATS[suffix]
    raise ValueError(
        f"unsupported file format {suffix!r} for {path} (embeddings: .npy, .npz, .parquet, "
        ".jsonl; texts: .jsonl, .csv, .parquet, .txt)."
    )


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


#: temporary outputs are named ``.<name>.privembed-<pid>-<random>.tmp`` next to the output
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.privembed-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
SIDECAR_SUFFIX = ".privembed.json"
_SIDECAR_FORMAT = "privembed-npy-sidecar/1"


def sidecar_path(path: str | Path) -> Path:
    """Where the metadata of a ``.npy`` file lives (``x.npy`` -> ``x.npy.privembed.json``)."""
    p = Path(path)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(dst: str | Path) -> list[Path]:
    """Delete temporary outputs for ``dst`` left by processes that no longer run (SIGKILL,
    power loss); returns what was removed. Temporaries of running processes are kept."""
    dst = Path(dst)
    parent = dst.parent if str(dst.parent) else Path(".")
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    names = {dst.name, sidecar_path(dst).name}
    for entry in parent.iterdir():
        m = _TMP_RE.match(entry.name)
        if m is None or m.group("name") not in names:
            continue
        if not _pid_alive(int(m.group("pid"))):
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed.append(entry)
    return removed


def _checked(batches: Iterator[Batch]) -> Iterator[Batch]:
    """The batches of a release, with a cancellation checkpoint after each is read."""
    for b in batches:
        checkpoint("batch.read")
        yield b


def preload(*paths: str | Path) -> None:
    """Import now what reading or writing these files will import lazily (pyarrow, and the
    pandas that pyarrow loads on first use), so that no import runs once an output is open."""
    if any(Path(p).suffix.lower() == ".parquet" for p in paths):
        pa = _pa()
        with contextlib.suppress(ImportError):
            import pandas  # noqa: F401 - pyarrow imports it lazily in the first batch otherwise
        pa.table({"x": [1]}).to_pylist()


def _temp_for(dst: Path) -> Path:
    parent = dst.parent if str(dst.parent) else Path(".")
    return parent / f".{dst.name}.privembed-{os.getpid()}-{secrets.token_hex(4)}.tmp"


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (main thread) so that a commit and its rename happen together."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_output(
    dst: str | Path,
    *,
    src: str | Path | None = None,
    commit: Callable[[], object] | None = None,
    sidecar: Callable[[Path], dict[str, Any]] | None = None,
    overwrite: bool = True,
) -> Iterator[Path]:
    """Yield a temporary path next to ``dst``; publish it as ``dst`` on success, delete on error.

    Publication is: ``commit()`` (e.g. the ledger records the release), then the rename --
    with SIGINT/SIGTERM held in between, so a signal cannot separate the two. A crash there
    (SIGKILL) leaves a committed release without output, never an output without its commit.
    ``sidecar(tmp)`` returns metadata written to :func:`sidecar_path` just before the rename
    (``.npy`` files carry their metadata that way). Temporaries of dead processes for the same
    ``dst`` are removed first; on any error (or signal) this one is removed too.

    Raises
    ------
    ValueError
        ``dst`` equals ``src`` (the input is never touched).
    FileExistsError
        ``dst`` exists and ``overwrite`` is False.
    """
    dst = Path(dst)
    if src is not None and Path(src).resolve() == dst.resolve():
        raise ValueError(f"output must differ from the input, got output={str(dst)!r}.")
    if dst.is_dir():
        raise IsADirectoryError(f"output is a directory: {dst}")
    if not overwrite and dst.exists():
        raise FileExistsError(f"output exists: {dst} (pass --overwrite to replace it).")
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.exists():
        raise FileNotFoundError(f"output folder does not exist: {parent}")
    remove_stale_temporaries(dst)
    tmp_path = _temp_for(dst)
    side_tmp: Path | None = None
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    try:
        checkpoint("output.opened")
        yield tmp_path
        os.chmod(tmp_path, _default_mode(dst))
        if sidecar is not None:
            side = sidecar_path(dst)
            side_tmp = _temp_for(side)
            body = {
                "format": _SIDECAR_FORMAT,
                "size": tmp_path.stat().st_size,
                "metadata": sidecar(tmp_path),
            }
            side_tmp.write_text(json.dumps(body), encoding="utf-8")
            os.chmod(side_tmp, _default_mode(dst))
        checkpoint("commit.before")
        with _signals_deferred():
            if commit is not None:
                commit()
            checkpoint("commit.after", stop=False)  # signals are held: the rename follows
            if side_tmp is not None:
                os.replace(side_tmp, sidecar_path(dst))
            os.replace(tmp_path, dst)
    except BaseException:
        for t in (tmp_path, side_tmp):
            if t is not None:
                with contextlib.suppress(FileNotFoundError):
                    t.unlink()
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


def _loads_meta(raw: str | bytes, where: Path | str) -> dict[str, Any]:
    try:
        out = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    except RecursionError:
        raise DataError(f"{where}: privembed metadata is nested too deeply to read.") from None
    return out if isinstance(out, dict) else {}


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


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------


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
            npz_ids = _npz_ids(z, p)
            ids = None if npz_ids is None else _id_array(npz_ids)
            meta = _npz_meta(z, p)
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
        ids = _id_array(table.column(idc).to_pylist()) if idc else None
        meta = _parquet_meta(schema, p)
    else:
        ids_list: list[Any] = []
        rows: list[Any] = []
        with_id = 0
        for lineno, obj in _iter_jsonl(p):
            if "embedding" not in obj:
                raise DataError(
                    f"{p}:{lineno}: missing 'embedding' (is this a text file? embed it first)."
                )
            if "id" in obj:
                with_id += 1
            elif with_id:
                raise DataError(f"{p}:{lineno}: missing 'id' (other lines have ids).")
            ids_list.append(obj.get("id"))
            rows.append(obj["embedding"])
        if 0 < with_id < len(rows):
            raise DataError(f"{p}: some lines have an 'id' and others do not.")
        try:
            X = np.asarray(rows, dtype=np.float64)
        except ValueError:
            raise DataError(
                f"{p}: embeddings have different lengths (dimension mismatch)."
            ) from None
        ids = _id_array(ids_list) if with_id else None
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
            except RecursionError:
                raise DataError(f"{p}:{lineno}: JSON nested too deeply.") from None
            if not isinstance(obj, dict):
                raise DataError(f"{p}:{lineno}: each line must be a JSON object.")
            yield lineno, obj


def _jsonl_row(p: Path, lineno: int, obj: dict[str, Any], with_id: bool | None) -> bool:
    """Check one line of an embeddings JSONL file; whether it has an id."""
    if "embedding" not in obj:
        raise DataError(f"{p}:{lineno}: missing 'embedding' (is this a text file? embed it first).")
    has = "id" in obj
    if with_id is not None and has != with_id:
        if with_id:
            raise DataError(f"{p}:{lineno}: missing 'id' (other lines have ids).")
        raise DataError(f"{p}: some lines have an 'id' and others do not.")
    return has


def _check_jsonl(p: Path) -> tuple[int, int]:
    """(rows, dimension) of an embeddings JSONL file, every line checked and none kept: the
    errors :func:`read_embeddings` raises, raised before a stream of it starts."""
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
    :func:`read_embeddings` reads them; ids as Python values, or None for a file without).

    Only the current batch is held. The lines are checked as they come (:func:`_check_jsonl`
    checks them all before a caller writes anything: :func:`iter_batches`).
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
    return None if t.ids is None else list(t.ids)


@dataclass
class TextTable:
    """Texts read from a file, with their ids and the file's other fields.

    Attributes
    ----------
    texts : list of str
        Non-empty strings, in file order.
    ids : list or None
        Record ids (each keeps its type: ``1`` and ``"1"`` differ), or None when the file has
        none -- line numbers are not record ids.
    columns : pyarrow.Table or None
        Every other field or column, one row per text (None when there are none).
    """

    texts: list[str]
    ids: list[Any] | None = None
    columns: Any = None

    @property
    def n(self) -> int:
        return len(self.texts)


def holds_texts(path: str | Path, *, text_field: str = "text") -> bool:
    """Whether ``path`` holds texts rather than embeddings: a ``.txt`` or ``.csv`` file, JSONL
    whose first object has ``text_field`` and no ``embedding``, or Parquet with a
    ``text_field`` column and no float-list column."""
    p = Path(path)
    fmt = TEXT_FORMATS.get(p.suffix.lower())
    if fmt in ("txt", "csv"):
        return True
    if fmt is None or not p.is_file():
        return False
    if fmt == "parquet":
        try:
            schema = _open_parquet(p).schema_arrow
        except DataError:
            return False
        try:
            _embedding_column(schema, None, p)
        except DataError:  # no (single) embedding column
            return text_field in schema.names
        return False
    with p.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    return False
                return isinstance(obj, dict) and text_field in obj and "embedding" not in obj
    return False


def read_texts(
    path: str | Path, *, text_key: str = "text", id_key: str = "id"
) -> tuple[list[Any] | None, list[str]]:
    """Read ``{"id": ..., "text": ...}`` lines, a CSV or Parquet text column, or a plain
    ``.txt`` (one text per line).

    Returns ``(ids, texts)``; ``ids`` is None when the file carries none (a ``.txt`` file, or
    JSONL lines without ``id``): line numbers are *not* record ids, because another file's line
    5 is another record. Ids keep their JSON types (``1`` and ``"1"`` differ). See
    :func:`read_text_table` for the other fields.
    """
    t = read_text_table(path, text_field=text_key, id_field=id_key)
    return t.ids, t.texts


def read_text_table(
    path: str | Path,
    *,
    text_field: str = "text",
    id_field: str = "id",
    require_ids: bool = False,
) -> TextTable:
    """Read texts, their ids and every other field from JSONL, CSV, Parquet or ``.txt``.

    Parameters
    ----------
    path : path
        ``.jsonl``/``.ndjson`` (one object per line), ``.csv`` (a header row), ``.parquet``
        (a string column), or ``.txt`` (one text per non-empty line; no ids, no fields).
    text_field : str, default "text"
        The field or column holding the texts.
    id_field : str, default "id"
        The field or column holding record ids; a file without it has no ids.
    require_ids : bool, default False
        Refuse a file without ``id_field`` (when the caller named it explicitly).

    Raises
    ------
    ValueError
        Unsupported suffix (the message lists the text formats).
    privembed.DataError
        No ``text_field``, an empty text, ids on some rows only, a corrupt file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = pathlib.Path(tmp) / "notes.csv"
    ...     _ = p.write_text("id,text,lang\\n1,Bonjour,fr\\n2,Hello,en\\n")
    ...     t = read_text_table(p)
    >>> t.ids, t.texts, t.columns.column_names
    ([1, 2], ['Bonjour', 'Hello'], ['lang'])
    """
    p = Path(path)
    fmt = detect_text_format(p)
    _require_exists(p)
    if fmt == "txt":
        if require_ids:
            raise DataError(f"{p}: a .txt file has no {id_field!r} field; use JSONL or CSV.")
        with p.open(encoding="utf-8") as fh:
            texts = [ln.rstrip("\n") for ln in fh if ln.strip()]
        if not texts:
            raise DataError(f"{p} contains no text.")
        return TextTable(texts=texts)
    if fmt == "jsonl":
        table = _text_table_jsonl(p, text_field, id_field)
    else:
        table = _text_table_arrow(p, fmt, text_field, id_field)
    if require_ids and table.ids is None:
        raise DataError(f"{p} has no {id_field!r} field for the record ids.")
    return table


def _text_table_jsonl(p: Path, text_field: str, id_field: str) -> TextTable:
    ids: list[Any] = []
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    with_id = 0
    for lineno, obj in _iter_jsonl(p):
        t = obj.get(text_field)
        if not isinstance(t, str) or not t.strip():
            raise DataError(f"{p}:{lineno}: missing or empty {text_field!r} string.")
        if id_field in obj:
            with_id += 1
        elif with_id:
            raise DataError(f"{p}:{lineno}: missing {id_field!r} (other lines have ids).")
        ids.append(obj.get(id_field))
        texts.append(t)
        others.append({k: v for k, v in obj.items() if k not in (text_field, id_field)})
    if not texts:
        raise DataError(f"{p} contains no texts.")
    if 0 < with_id < len(texts):
        raise DataError(f"{p}: some lines have an {id_field!r} and others do not.")
    return TextTable(texts=texts, ids=ids if with_id else None, columns=_columns_of(others))


def _columns_of(rows: list[dict[str, Any]]) -> Any:
    """Other JSONL fields as a pyarrow table (missing fields are nulls; a field whose values
    mix types is kept as JSON text)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    if not names:
        return None
    pa = _pa()
    arrays = {}
    for name in names:
        values = [r.get(name) for r in rows]
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            arrays[name] = pa.array([None if v is None else json.dumps(v) for v in values])
    return pa.table(arrays)


def _text_table_arrow(p: Path, fmt: str, text_field: str, id_field: str) -> TextTable:
    pa = _pa()
    if fmt == "csv":
        pcsv = require("pyarrow.csv", "io", purpose="CSV files")
        try:
            # the text column stays text even when it looks like numbers (absent: ignored)
            convert = pcsv.ConvertOptions(column_types={text_field: pa.string()})
            table = pcsv.read_csv(p, convert_options=convert)
        except pa.ArrowInvalid as exc:
            raise DataError(f"cannot read {p} as CSV: {str(exc).splitlines()[0]}") from None
    else:
        try:
            table = _open_parquet(p).read()
        except DataError:
            raise
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise DataError(f"cannot read {p}: {str(exc).splitlines()[0]}") from None
    names = table.column_names
    if text_field not in names:
        raise DataError(
            f"{p} has no {text_field!r} column (columns: {', '.join(names) or 'none'}); name "
            "the text column (--text-field)."
        )
    col = table.column(text_field)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise DataError(f"{p}: column {text_field!r} must hold strings, got {col.type}.")
    texts = col.to_pylist()
    for i, t in enumerate(texts):
        if t is None or not t.strip():
            raise DataError(f"{p}: row {i + 1}: missing or empty {text_field!r}.")
    if not texts:
        raise DataError(f"{p} contains no texts.")
    ids = None
    if id_field in names:
        ids = table.column(id_field).to_pylist()
        missing = [i for i, v in enumerate(ids) if v is None]
        if missing:
            raise DataError(
                f"{p}: row {missing[0] + 1}: missing {id_field!r} (other rows have ids)."
            )
    rest = [n for n in names if n not in (text_field, id_field)]
    return TextTable(texts=texts, ids=ids, columns=table.select(rest) if rest else None)


def _id_array(ids: list[Any]) -> NDArray[Any]:
    """Ids as a 1-D object array that keeps each id's own type (never coerced to strings)."""
    out = np.empty(len(ids), dtype=object)
    out[:] = ids
    return out


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
            pa = _pa()
            pq = require("pyarrow.parquet", "io")
            cols: dict[str, Any] = {}
            if id_list is not None:
                cols["id"] = _id_column(pa, id_list)
            if extra is not None:
                for name in extra.column_names:
                    if name not in ("id", "embedding"):
                        cols[name] = extra.column(name)
            cols["embedding"] = _numpy_to_list(X)
            table = pa.table(cols)
            table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
            pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)
        else:
            _write_plain(tmp, fmt, X, id_list, meta, extra=extra)
    return p


def _plain_ids(ids: Any) -> list[Any]:
    """Ids as a list of Python ints and strings (each keeps its own type)."""
    return [x.item() if isinstance(x, np.generic) else x for x in list(ids)]


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


# ---------------------------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------------------------


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
        try:
            arr = np.load(p, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            raise DataError(f"cannot read {p} as .npy: {str(exc).splitlines()[0]}") from None
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
    pa = _pa()
    pq = require("pyarrow.parquet", "io")
    writer = None
    rows = 0
    dim_out: int | None = None
    try:
        for b in batches:
            Y = fn(b)
            dim_out = Y.shape[1]
            cols: dict[str, Any] = {}
            if b.ids is not None:
                cols["id"] = _id_column(pa, _plain_ids(b.ids))
            if b.extra is not None:
                for name in kept:
                    cols[name] = b.extra.column(name)
            cols["embedding"] = _numpy_to_list(Y)
            tbl = pa.table(cols)
            if writer is None:
                schema = tbl.schema.with_metadata({META_KEY: json.dumps(meta).encode()})
                writer = pq.ParquetWriter(tmp, schema)
            writer.write_table(
                tbl.replace_schema_metadata(writer.schema.metadata),
                row_group_size=ROW_GROUP_ROWS,
            )
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
        col = _embedding_column(schema, column, p)
        idc = id_column or ("id" if "id" in schema.names else None)
        names = [c for c in schema.names if c not in (col, idc)]
    missing = [k for k in keep if k not in names]
    if missing:
        have = ", ".join(names) if names else "none"
        raise DataError(
            f"{p.name} has no column {missing[0]!r} to keep (its other columns: {have})."
        )
    return [c for c in names if c in keep], [c for c in names if c not in keep]


def _write_plain(
    tmp: Path, fmt: str, X: NDArray[Any], ids: Any, meta: dict[str, Any], *, extra: Any = None
) -> None:
    """``.npz`` or JSONL; JSONL lines also carry ``extra``'s columns (a pyarrow table)."""
    if fmt == "npz":
        arrays: dict[str, Any] = {"embeddings": X, "metadata": np.array(json.dumps(meta))}
        if ids is not None:
            kinds = {type(x) for x in ids}
            if kinds <= {int} or kinds <= {str}:
                arrays["ids"] = np.asarray(ids)
            else:  # mixed types: a numpy array would turn every id into a string
                arrays["ids_json"] = np.array(json.dumps(list(ids)))
        with tmp.open("wb") as fh:
            np.savez(fh, **arrays)
    else:  # jsonl
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
