"""Embeddings I/O: round trips, metadata, streaming, atomicity, bad files."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privembed import DataError
from privembed.data.io import (
    atomic_output,
    iter_batches,
    read_embeddings,
    read_metadata,
    read_texts,
    transform_file,
    write_embeddings,
)


@pytest.fixture
def X() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".parquet", ".jsonl"])
def test_round_trip(tmp_path, X, suffix):
    p = tmp_path / f"e{suffix}"
    ids = [f"r{i}" for i in range(len(X))]
    write_embeddings(p, X, ids=None if suffix == ".npy" else ids, metadata={"a": 1})
    t = read_embeddings(p)
    np.testing.assert_allclose(t.X, X, rtol=1e-6)
    if suffix == ".parquet":
        assert t.X.dtype == np.float32
    if suffix != ".npy":
        assert list(map(str, t.ids)) == ids
    if suffix in (".npz", ".parquet"):
        assert t.metadata == {"a": 1}
        assert read_metadata(p) == {"a": 1}


def test_parquet_variable_list_column_and_named_other_columns_kept(tmp_path, X):
    p = tmp_path / "in.parquet"
    table = pa.table(
        {
            "doc": pa.array([f"d{i}" for i in range(len(X))]),
            "vec": pa.array(X.tolist(), type=pa.list_(pa.float32())),
            "label": pa.array(np.arange(len(X))),
        }
    )
    pq.write_table(table, p)
    out = tmp_path / "out.parquet"
    summary = transform_file(p, out, lambda b: b.X * 2, batch_rows=7, id_column="doc")
    assert summary["rows"] == len(X) and summary["dropped_columns"] == ["label"]
    assert pq.read_schema(out).names == ["id", "embedding"]  # only what is named is kept
    summary = transform_file(
        p, out, lambda b: b.X * 2, batch_rows=7, id_column="doc", keep_columns=["label"]
    )
    assert summary["dropped_columns"] == []
    back = pq.read_table(out)
    assert back.column("label").to_pylist() == list(range(len(X)))
    assert back.column("id").to_pylist() == [f"d{i}" for i in range(len(X))]
    np.testing.assert_allclose(read_embeddings(out).X, X * 2, rtol=1e-6)


def test_streaming_batches_are_bounded(tmp_path, X):
    p = tmp_path / "e.parquet"
    write_embeddings(p, X)
    n, dim, _, batches = iter_batches(p, batch_rows=16)
    sizes = [b.num_rows for b in batches]
    assert n == 50 and dim == 8 and max(sizes) <= 16 and sum(sizes) == 50


def test_npy_streaming_uses_memmap_and_keeps_order(tmp_path, X):
    p = tmp_path / "e.npy"
    np.save(p, X)
    out = tmp_path / "o.npy"
    transform_file(p, out, lambda b: b.X + 1, batch_rows=9)
    np.testing.assert_allclose(np.load(out), X + 1)


def test_failure_midway_leaves_no_output_and_input_untouched(tmp_path, X):
    p = tmp_path / "e.parquet"
    write_embeddings(p, X)
    before = p.read_bytes()
    out = tmp_path / "o.parquet"

    def boom(b):
        if b.start > 0:
            raise DataError("bad batch")
        return b.X

    with pytest.raises(DataError, match="bad batch"):
        transform_file(p, out, boom, batch_rows=10)
    assert not out.exists()
    assert p.read_bytes() == before
    assert [f.name for f in tmp_path.iterdir()] == ["e.parquet"]  # no temp files left


def test_output_equal_to_input_is_refused(tmp_path, X):
    p = tmp_path / "e.npy"
    np.save(p, X)
    with pytest.raises(ValueError, match="output must differ from the input"):
        transform_file(p, p, lambda b: b.X)


def test_atomic_output_replaces_only_on_success(tmp_path):
    dst = tmp_path / "x.txt"
    dst.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(dst) as tmp:
        tmp.write_text("new")
        raise RuntimeError
    assert dst.read_text() == "old"
    with atomic_output(dst) as tmp:
        tmp.write_text("new")
    assert dst.read_text() == "new"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a parquet file", "cannot read .* as Parquet"),
        (b"", "cannot read .* as Parquet"),
    ],
)
def test_corrupt_parquet(tmp_path, content, match):
    p = tmp_path / "bad.parquet"
    p.write_bytes(content)
    with pytest.raises(DataError, match=match):
        read_embeddings(p)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(FileNotFoundError, match="file not found"):
        read_embeddings(tmp_path / "none.parquet")
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(ValueError, match=r"unsupported file format '\.csv'"):
        read_embeddings(tmp_path / "x.csv")


def test_nan_zero_and_ragged_rows_are_rejected(tmp_path):
    p = tmp_path / "e.npy"
    A = np.ones((4, 3))
    A[2, 1] = np.nan
    np.save(p, A)
    with pytest.raises(DataError, match="NaN or inf values \\(first: row 2\\)"):
        read_embeddings(p)
    A[2, 1] = 1
    A[3] = 0
    np.save(p, A)
    with pytest.raises(DataError, match="all-zero row"):
        read_embeddings(p)
    q = tmp_path / "r.parquet"
    pq.write_table(pa.table({"embedding": pa.array([[1.0, 2.0], [1.0]])}), q)
    with pytest.raises(DataError, match="dimension mismatch"):
        read_embeddings(q)


def test_read_texts_jsonl_and_errors(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "text": "hello"}\n\n{"id": 1, "text": "world"}\n')
    ids, texts = read_texts(p)
    assert ids == ["a", 1] and texts == ["hello", "world"]  # each id keeps its JSON type
    # line numbers are not ids: a file without ids has none, a file with some has them all
    p.write_text('{"text": "hello"}\n{"text": "world"}\n')
    assert read_texts(p) == (None, ["hello", "world"])
    p.write_text('{"id": "a", "text": "hello"}\n{"text": "world"}\n')
    with pytest.raises(DataError, match=r"t.jsonl:2: missing 'id' \(other lines have ids\)"):
        read_texts(p)
    p.write_text('{"id": "a", "text": "hello"}\n{oops\n')
    with pytest.raises(DataError, match=r"t.jsonl:2: invalid JSON"):
        read_texts(p)
    p.write_text(json.dumps({"id": 1, "text": ""}) + "\n")
    with pytest.raises(DataError, match="missing or empty 'text'"):
        read_texts(p)


def test_read_text_table_csv_parquet_jsonl_and_holds_texts(tmp_path):
    from privembed.data.io import holds_texts, read_text_table

    c = tmp_path / "t.csv"
    c.write_text('id,text,n\n1,"12",3\n2,"hello, world",4\n')
    t = read_text_table(c)
    assert t.texts == ["12", "hello, world"] and t.ids == [1, 2]  # text stays text
    assert t.columns.column("n").to_pylist() == [3, 4]
    with pytest.raises(DataError, match=r"no 'body' column \(columns: id, text, n\)"):
        read_text_table(c, text_field="body")
    with pytest.raises(DataError, match="has no 'doc' field"):
        read_text_table(c, id_field="doc", require_ids=True)
    assert read_text_table(c, id_field="doc").ids is None
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "k": [1.5, 2.5]}), p)
    t = read_text_table(p)
    assert t.ids is None and t.columns.column_names == ["k"] and holds_texts(p)
    pq.write_table(pa.table({"text": [1, 2]}), p)
    with pytest.raises(DataError, match="must hold strings"):
        read_text_table(p)
    pq.write_table(pa.table({"text": ["a", None]}), p)
    with pytest.raises(DataError, match="row 2: missing or empty 'text'"):
        read_text_table(p)
    j = tmp_path / "t.jsonl"
    j.write_text('{"id": 1, "text": "a", "x": 1}\n{"id": 2, "text": "b", "x": "two"}\n')
    t = read_text_table(j)
    assert t.columns.column("x").to_pylist() == ["1", '"two"']  # mixed types: kept as JSON
    j.write_text('{"id": 1, "text": "a"}\n')
    assert read_text_table(j).columns is None
    e = tmp_path / "e.parquet"
    write_embeddings(e, np.eye(3, dtype=np.float32))
    assert holds_texts(c) and holds_texts(j) and not holds_texts(e)
    with pytest.raises(ValueError, match=r"\(use .jsonl, .csv, .parquet, .txt\)"):
        read_text_table(tmp_path / "t.npy")


def test_jsonl_output_carries_extra_columns(tmp_path, X):
    out = tmp_path / "o.jsonl"
    extra = pa.table({"lang": ["en"] * len(X), "id": list(range(len(X)))})
    write_embeddings(out, X, ids=[f"r{i}" for i in range(len(X))], extra=extra)
    first = json.loads(out.read_text().splitlines()[0])
    assert list(first) == ["id", "lang", "embedding"] and first["id"] == "r0"
    assert read_embeddings(out).X.shape == X.shape


def test_every_name_imported_from_privembed_data_io_is_there():
    """io.py re-exports the modules it was split into: each name another module, test or
    benchmark imports from it (many lazily, inside a function) is importable, privates too."""
    import ast
    from pathlib import Path

    import privembed.data.io as io

    root = Path(__file__).resolve().parents[1]
    wanted: dict[str, str] = {}
    for folder in ("src", "tests", "benchmarks", "tools"):
        for f in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("data.io"):
                    wanted.update((a.name, f.name) for a in node.names)
    assert {"write_embeddings", "_list_to_numpy", "_require_exists"} <= set(wanted)
    missing = {name: where for name, where in wanted.items() if not hasattr(io, name)}
    assert not missing, missing
    assert set(io.__all__) <= set(dir(io))


def test_jsonl_ids_on_some_lines_only_are_refused_alike_for_texts_and_embeddings(tmp_path):
    """Texts and embeddings JSONL check their ids with one rule and the same messages."""
    for body, message in [
        ('{"id": 1, T}\n{T}\n', r"f\.jsonl:2: missing 'id' \(other lines have ids\)\."),
        ('{T}\n{"id": 1, T}\n', r"f\.jsonl: some lines have an 'id' and others do not\."),
    ]:
        f = tmp_path / "f.jsonl"
        f.write_text(body.replace("T", '"text": "a", "embedding": [1.0]'))
        for reader in (read_texts, read_embeddings):
            with pytest.raises(DataError, match=message):
                reader(f)
