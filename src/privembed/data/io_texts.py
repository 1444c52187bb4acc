"""Files of texts: JSONL, CSV (a header row), a Parquet string column, or ``.txt`` (one text a
line), with their ids and every other field kept alongside.

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core._optional import require
from ..core._validation import DataError
from .io_common import TEXT_FORMATS, _id_presence, _require_exists, detect_text_format
from .io_jsonl import _iter_jsonl, iter_json_lines
from .io_parquet import _embedding_column, _open_parquet, _pa


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
    with contextlib.closing(iter_json_lines(p)) as lines:
        try:
            _lineno, obj = next(lines, (0, None))
        except DataError:  # not JSON: not a file of texts
            return False
    return isinstance(obj, dict) and text_field in obj and "embedding" not in obj


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
    with_id: bool | None = None
    for lineno, obj in _iter_jsonl(p):
        t = obj.get(text_field)
        if not isinstance(t, str) or not t.strip():
            raise DataError(f"{p}:{lineno}: missing or empty {text_field!r} string.")
        with_id = _id_presence(p, lineno, obj, id_field, with_id)
        ids.append(obj.get(id_field))
        texts.append(t)
        others.append({k: v for k, v in obj.items() if k not in (text_field, id_field)})
    if not texts:
        raise DataError(f"{p} contains no texts.")
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
