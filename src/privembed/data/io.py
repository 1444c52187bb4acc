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

This module is the public face of the files, kept in one module each by what it does:
``io_common`` (formats, tables, ids, JSON errors), ``io_atomic`` (atomic outputs),
``io_parquet``, ``io_jsonl``, ``io_embeddings`` (whole files read and written), ``io_texts``
and ``io_stream`` (batches, :func:`transform_file`, :func:`describe_file`).
"""

from __future__ import annotations

# `x as x`: private helpers other privembed modules import from here, kept importable
from .io_atomic import SIDECAR_SUFFIX, atomic_output, remove_stale_temporaries, sidecar_path
from .io_common import (
    FORMATS,
    TEXT_FORMATS,
    Batch,
    EmbeddingTable,
    check_input_format,
    detect_format,
    detect_text_format,
    parse_json,
)
from .io_common import _require_exists as _require_exists
from .io_embeddings import read_embeddings, read_ids, read_metadata, write_embeddings
from .io_jsonl import _iter_jsonl as _iter_jsonl
from .io_jsonl import iter_json_lines, iter_jsonl_batches
from .io_parquet import META_KEY, ROW_GROUP_ROWS, preload
from .io_parquet import _embedding_column as _embedding_column
from .io_parquet import _list_to_numpy as _list_to_numpy
from .io_parquet import _numpy_to_list as _numpy_to_list
from .io_parquet import _open_parquet as _open_parquet
from .io_stream import describe_file, iter_batches, other_columns, transform_file
from .io_texts import TextTable, holds_texts, read_text_table, read_texts

__all__ = [
    "FORMATS",
    "META_KEY",
    "ROW_GROUP_ROWS",
    "SIDECAR_SUFFIX",
    "TEXT_FORMATS",
    "Batch",
    "EmbeddingTable",
    "TextTable",
    "atomic_output",
    "check_input_format",
    "describe_file",
    "detect_format",
    "detect_text_format",
    "holds_texts",
    "iter_batches",
    "iter_json_lines",
    "iter_jsonl_batches",
    "other_columns",
    "parse_json",
    "preload",
    "read_embeddings",
    "read_ids",
    "read_metadata",
    "read_text_table",
    "read_texts",
    "remove_stale_temporaries",
    "sidecar_path",
    "transform_file",
    "write_embeddings",
]
