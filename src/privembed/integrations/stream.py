"""Protect a stream of embeddings: stdin to stdout for shell pipelines (JSONL or NPY).

Formats:

* **JSONL** -- one object per line with an ``embedding`` array and, for keyed noise or a ledger,
  an ``id``; other fields are dropped unless named in ``keep_fields`` (then copied as they are,
  not protected -- as ``privembed protect --keep-field``).
  Read and written in batches of ``batch_rows`` lines, so memory stays bounded and output flows
  as input arrives. Numbers are parsed as float64 and written back exactly (shortest repr).
* **NPY** -- one ``.npy`` array (n, d), C order, float32 or float64, read row block by row block
  after its header. NPY carries no record ids, so it cannot be used with a key or a ledger
  (position-derived ids would give different records the same noise across files). As output
  of JSONL input, the row count must be known before the header is written, so that case
  buffers the whole stream.

On bad input the stream stops with a one-line error at the first bad batch: earlier batches have
already been written (use ``set -o pipefail`` so a pipeline sees the failure). stdin is the
source and stdout the sink of :func:`privembed.release.publish`: each batch is one release,
recorded in the ledger before it is written; record ids must be unique over the whole stream
(checked in bounded memory).

Examples
--------
>>> import io
>>> from privembed import get_mechanism
>>> src = io.BytesIO(b'{"id": 1, "embedding": [3.0, 4.0], "tag": "x"}\\n')
>>> dst = io.BytesIO()
>>> mech = get_mechanism("laplace", epsilon=1e9)          # almost no noise
>>> protect_stream(src, dst, mech, rng=0, keep_fields=["tag"])["rows"]
1
>>> line = json.loads(dst.getvalue())
>>> line["id"], line["tag"], [round(v, 6) for v in line["embedding"]]
(1, 'x', [0.6, 0.8])
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError, check_choice, check_int
from ..core.cancel import checkpoint, cooperative
from ..mechanisms import Mechanism
from ..release import Batch, ReleaseRequest, Releases, publish

__all__ = ["FORMATS", "protect_stream"]

FORMATS = ("jsonl", "npy")


def _jsonl_batches(
    src: IO[bytes], batch_rows: int
) -> Iterator[tuple[NDArray[np.float64], list[dict[str, Any]], int]]:
    """Yield (X, records without 'embedding', first line number) per batch."""
    rows: list[Any] = []
    recs: list[dict[str, Any]] = []
    first = 1
    dim: int | None = None
    lineno = 0
    for lineno, raw in enumerate(src, start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise DataError(f"stdin:{lineno}: invalid JSON ({msg}).") from None
        if not isinstance(obj, dict):
            raise DataError(f"stdin:{lineno}: each line must be a JSON object.")
        emb = obj.pop("embedding", None)
        if not isinstance(emb, list) or not emb:
            raise DataError(f"stdin:{lineno}: missing or empty 'embedding' array.")
        if dim is None:
            dim = len(emb)
        elif len(emb) != dim:
            raise DataError(
                f"stdin:{lineno}: embedding has {len(emb)} values, expected {dim} "
                "(dimension mismatch)."
            )
        if not rows:
            first = lineno
        rows.append(emb)
        recs.append(obj)
        if len(rows) == batch_rows:
            yield _to_array(rows, first), recs, first
            rows, recs = [], []
    if rows:
        yield _to_array(rows, first), recs, first


def _to_array(rows: list[Any], first: int) -> NDArray[np.float64]:
    try:
        return np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            f"stdin: lines from {first}: embeddings must be arrays of numbers."
        ) from None


def _read_exact(src: IO[bytes], n: int) -> bytes:
    chunks = []
    left = n
    while left:
        b = src.read(left)
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _npy_header(src: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(src)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(src)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(src)
    except ValueError as exc:
        raise DataError(f"stdin is not a .npy stream: {str(exc).splitlines()[0]}") from None
    if fortran:
        raise DataError("stdin: Fortran-order .npy is not supported; write it in C order.")
    if len(shape) != 2:
        raise DataError(f"stdin: embeddings must be a 2-D (n, d) array, got shape {shape}.")
    if dtype not in (np.float32, np.float64):
        raise DataError(f"stdin: embeddings must be float32 or float64, got dtype={dtype}.")
    return tuple(int(s) for s in shape), np.dtype(dtype)


def _npy_batches(
    src: IO[bytes], batch_rows: int
) -> tuple[int, Iterator[tuple[NDArray[Any], list[dict[str, Any]], int]]]:
    (n, d), dtype = _npy_header(src)

    def gen() -> Iterator[tuple[NDArray[Any], list[dict[str, Any]], int]]:
        for start in range(0, n, batch_rows):
            m = min(batch_rows, n - start)
            raw = _read_exact(src, m * d * dtype.itemsize)
            if len(raw) != m * d * dtype.itemsize:
                raise DataError(
                    f"stdin: .npy stream ended early (header says {n} rows, got fewer)."
                )
            X = np.frombuffer(raw, dtype=dtype).reshape(m, d)
            yield X, [{"id": start + i} for i in range(m)], start + 1

    return n, gen()


def _write_npy_header(dst: IO[bytes], n: int, d: int, dtype: np.dtype[Any]) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n, d)}
    np.lib.format.write_array_header_1_0(dst, header)


def _jsonl_lines(recs: list[dict[str, Any]], Y: NDArray[Any]) -> bytes:
    lines = [json.dumps({**r, "embedding": row}) for r, row in zip(recs, Y.tolist(), strict=True)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _input_batches(
    src: IO[bytes], in_format: str, batch_rows: int
) -> tuple[int | None, Iterator[tuple[NDArray[Any], list[dict[str, Any]], int]]]:
    """The input's row count (known for NPY only) and its batches."""
    if in_format == "npy":
        return _npy_batches(src, batch_rows)
    return None, _jsonl_batches(src, batch_rows)


def _record_ids(recs: list[dict[str, Any]], first: int, needs_ids: bool) -> list[Any] | None:
    """A batch's record ids, refused if missing (None: no ids are needed)."""
    if not needs_ids:
        return None
    missing = [i for i, r in enumerate(recs) if "id" not in r]
    if missing:
        raise DataError(
            f"stdin:{first + missing[0]}: missing 'id' (keyed noise and the ledger "
            "need record ids)."
        )
    return [r["id"] for r in recs]


class _StreamSource:
    """stdin as a source: JSONL lines (ids and the other fields carried to the sink) or NPY
    rows, batch by batch as they arrive."""

    name = "stdin"

    def __init__(
        self, src: IO[bytes], in_format: str, batch_rows: int, *, model: str | None, needs_ids: bool
    ) -> None:
        self.model, self.needs_ids = model, needs_ids
        self.n_known, self._batches = _input_batches(src, in_format, batch_rows)

    def batches(self) -> Iterator[Batch]:
        rows = 0
        for X, recs, first in self._batches:
            checkpoint("batch.read")
            ids = _record_ids(recs, first, self.needs_ids)
            yield Batch(
                X, ids, start=rows, name=f"stdin (lines from {first})", ids_at=f"stdin:{first}",
                carry=recs,
            )  # fmt: skip
            rows += X.shape[0]


class _StreamSink:
    """stdout as a sink: each batch is one release, committed before it is written -- JSONL
    lines with the kept fields, or NPY rows (after a header on the first batch when the row
    count is known, else buffered to the end)."""

    destination = "stdout"
    per_batch = True

    def __init__(
        self, dst: IO[bytes], out_format: str, n_known: int | None, keep_fields: Sequence[str]
    ) -> None:
        self.dst, self.out_format, self.n_known = dst, out_format, n_known
        drop = ("id", "embedding")
        self.keep = ["id", *dict.fromkeys(str(f) for f in keep_fields if f not in drop)]
        self.buffered: list[NDArray[Any]] = []
        self.started = False

    def run(self, source: Any, releases: Releases) -> None:
        for batch in source.batches():
            Y = releases.protect(batch)
            releases.commit()  # recorded before the batch is written
            self.write(batch.carry, Y)
            releases.published()
            checkpoint("batch.written")
        self.finish()

    def write(self, recs: list[dict[str, Any]], Y: NDArray[Any]) -> None:
        """Write (or buffer) one batch and flush."""
        if not self.started:
            self.started = True
            if self.out_format == "npy" and self.n_known is not None:
                _write_npy_header(self.dst, self.n_known, Y.shape[1], Y.dtype)
        if self.out_format == "jsonl":
            kept = [{f: r[f] for f in self.keep if f in r} for r in recs]
            self.dst.write(_jsonl_lines(kept, Y))
        elif self.n_known is not None:
            self.dst.write(np.ascontiguousarray(Y).tobytes())
        else:
            self.buffered.append(Y)
        self.dst.flush()

    def finish(self) -> None:
        """Write the buffered NPY output, header first (JSONL input, NPY output)."""
        if self.buffered:
            Yall = np.concatenate(self.buffered)
            _write_npy_header(self.dst, Yall.shape[0], Yall.shape[1], Yall.dtype)
            self.dst.write(np.ascontiguousarray(Yall).tobytes())
            self.dst.flush()


@cooperative
def protect_stream(
    src: IO[bytes],
    dst: IO[bytes],
    mechanism: Mechanism,
    *,
    key: Any = None,
    rng: Any = None,
    generator: str | None = None,
    model: str | None = None,
    in_format: str = "jsonl",
    out_format: str | None = None,
    batch_rows: int = 1024,
    ledger: Any = None,
    keep_fields: Sequence[str] = (),
) -> dict[str, Any]:
    """Read embeddings from ``src``, protect them batch by batch, write them to ``dst``.

    Parameters
    ----------
    src, dst : binary file objects
        E.g. ``sys.stdin.buffer`` and ``sys.stdout.buffer``.
    mechanism : Mechanism
    key, rng, generator, model
        As for :class:`privembed.release.Release` (a seed gives the same noise per row as
        ``privatize(X, rng=seed)`` on the whole stream, whatever ``batch_rows``).
    in_format, out_format : {"jsonl", "npy"}
        ``out_format`` defaults to ``in_format``.
    batch_rows : int
        Lines (rows) per batch.
    ledger : Ledger, optional
        Each batch is one release, committed before it is written (needs ids: JSONL ``id``).
    keep_fields : sequence of str
        JSONL fields besides ``id`` to copy into the output as they are (not protected);
        every other field is dropped.

    Returns
    -------
    dict
        ``rows``, ``dim_in``, ``dim_out``, ``batches``, ``fresh``, ``free``.

    Raises
    ------
    privembed.DataError
        Bad lines (with line numbers), missing or repeated ids for keyed noise or a ledger, a
        truncated NPY.
    """
    in_format = check_choice("in_format", in_format, FORMATS)
    out_format = check_choice("out_format", out_format or in_format, FORMATS)
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    request = ReleaseRequest(key=key, rng=rng, generator=generator, ledger=ledger)
    if in_format == "npy" and request.needs_ids:
        raise DataError(
            "NPY input carries no record ids; keyed noise and the ledger need them -- use "
            "JSONL lines with an 'id' field."
        )
    request.check()
    source = _StreamSource(src, in_format, batch_rows, model=model, needs_ids=request.needs_ids)
    sink = _StreamSink(dst, out_format, source.n_known, keep_fields)
    releases = publish(source, sink, mechanism, request)
    s = releases.summary
    if s is None or s.rows == 0:
        raise DataError("stdin contains no embeddings.")
    return {
        "rows": s.rows,
        "dim_in": s.dim_in,
        "dim_out": s.dim_out,
        "batches": releases.count,
        "fresh": s.fresh or 0,
        "free": s.free or 0,
    }
