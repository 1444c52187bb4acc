"""The pgvector store on a real PostgreSQL (tests/_postgres.py: one server per session, a fresh
database per test).

* the store contract of tests/integrations/test_stores.py, run here with ``kind = "pgvector"``
  (every contract test there that takes the ``kind`` fixture is collected again below);
* protected retrieval: exact re-rank through payloads gives the same results as FAISS on the
  same data and keys, with ``k`` and with ``recall``; HNSW and IVFFlat indexes where asked;
* bytea payloads, jsonb metadata, the registry of collections;
* SQL injection: hostile collection names, ids, metadata keys and values are refused as names
  or stored as data -- the database's tables are what they were;
* the DSN is never shown with its password, and a lost connection is one line.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import psycopg
import pytest

from privembed import DataError, get_mechanism
from privembed.integrations.collection import ProtectedCollection, Searcher
from privembed.integrations.stores import PgVectorStore

from .. import _postgres
from . import test_stores as contract
from .conftest import KEY, clustered, near_copies

SECRET = "pw-s3cr3t-store"


@pytest.fixture
def kind(pg_url, monkeypatch) -> str:
    """The contract's store kind: pgvector, its database from ``PRIVEMBED_PG_DSN``."""
    monkeypatch.setenv("PRIVEMBED_PG_DSN", pg_url)
    return "pgvector"


def _contract_tests() -> dict[str, object]:
    """Every test of test_stores.py that runs on the ``kind`` fixture (not on its own list)."""
    out = {}
    for name, fn in vars(contract).items():
        if not name.startswith("test_") or not callable(fn):
            continue
        if "kind" not in inspect.signature(fn).parameters:
            continue
        marks = getattr(fn, "pytestmark", [])
        if any(m.name == "parametrize" and "kind" in str(m.args[0]) for m in marks):
            continue
        out[name] = fn
    return out


globals().update(_contract_tests())


def test_the_contract_is_collected_here():
    names = set(_contract_tests())
    assert {"test_upsert_search_count_and_reopen", "test_open_errors"} <= names
    assert len(names) >= 5


# ---- protected retrieval: the same re-rank as FAISS ------------------------------------------
@pytest.mark.parametrize("index", [None, "hnsw", "ivfflat"])
def test_rerank_matches_faiss_on_the_same_data(pg_url, tmp_path, index):
    X = clustered(300, 32, seed=3)
    Q = near_copies(X[:20], scale=0.3, seed=4)
    ids = [f"r{i}" for i in range(len(X))]
    mech = get_mechanism("laplace", epsilon=30.0)
    results = {}
    options = {"faiss": {}, "pgvector": {"dsn": pg_url, "index": index, "lists": 4, "probes": 4}}
    for store in ("faiss", "pgvector"):
        with ProtectedCollection.open(
            store, tmp_path / store, "col", mechanism=mech, key=KEY, payloads=True,
            store_options=options[store],
        ) as col:  # fmt: skip
            col.add(ids, X)
            hits = col.query(Q, k=5, rerank=60)
            results[store] = (
                [[h.id for h in hs] for hs in hits],
                [[h.score for h in hs] for hs in hits],
            )
    assert results["pgvector"][0] == results["faiss"][0]
    np.testing.assert_allclose(results["pgvector"][1], results["faiss"][1], rtol=1e-6)
    exact = np.argsort(-(Q @ X.T / np.linalg.norm(X, axis=1)), axis=1)[:, :1]
    found = sum(f"r{exact[i, 0]}" in results["pgvector"][0][i] for i in range(len(Q)))
    assert found >= 18  # the re-rank finds the clean nearest neighbour (checked, not assumed)


def test_index_and_search_with_recall_through_the_command_line(pg_url, tmp_path, monkeypatch):
    """``privembed index --store pgvector --payloads`` then ``search --recall``: the sealed
    profile stays in the local folder (--path), the vectors in PostgreSQL; the same commands on
    FAISS return the same hits."""
    from typer.testing import CliRunner

    from privembed.cli import app
    from privembed.data.io import write_embeddings
    from privembed.keys.keyed import keygen

    monkeypatch.setenv("PRIVEMBED_PG_DSN", pg_url)
    key = tmp_path / "k.key"
    keygen(key)
    X = clustered(300, 16, seed=5)
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=[f"r{i}" for i in range(300)])
    qf = tmp_path / "q.npz"
    write_embeddings(qf, near_copies(X[:5], scale=0.2, seed=6))
    runner = CliRunner()
    got = {}
    for store in ("faiss", "pgvector"):
        db = tmp_path / store
        r = runner.invoke(app, ["index", str(src), "--store", store, "--path", str(db), "-m",
                                "laplace", "--epsilon", "50", "--key-file", str(key),
                                "--payloads"])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert (db / ".privembed-profile-privembed.sealed").exists()
        with Searcher(store, db, key=key) as s:
            found = s.search_vectors(np.load(qf)["embeddings"], k=3, recall=0.9)
            got[store] = [[h.id for h in r.hits] for r in found]
    assert got["pgvector"] == got["faiss"]
    assert [hs[0] for hs in got["pgvector"]] == [f"r{i}" for i in range(5)]


def test_payloads_are_bytea_and_metadata_is_jsonb(pg_url, tmp_path):
    with PgVectorStore(tmp_path, "raw", dsn=pg_url) as s:
        s.upsert(["a", "b"], np.eye(2), [{"n": 1, "ok": True, "f": 0.5}, None],
                 payloads=[b"\x00sealed\xff", b"second"])  # fmt: skip
        hit = s.search(np.array([1.0, 0.0]), k=1)[0][0]
        assert hit.payload == b"\x00sealed\xff" and hit.metadata == {"n": 1, "ok": True, "f": 0.5}
    with psycopg.connect(pg_url) as db:
        row = db.execute(
            "SELECT pg_typeof(payload)::text, pg_typeof(metadata)::text, payload "
            'FROM "pev_raw" WHERE id = %s',
            ("a",),
        ).fetchone()
        info = db.execute("SELECT info FROM privembed_collections WHERE name = 'raw'").fetchone()
    assert row[:2] == ("bytea", "jsonb") and bytes(row[2]) == b"\x00sealed\xff"
    assert '"store": "pgvector"' in info[0]


@pytest.mark.parametrize("index", ["hnsw", "ivfflat"])
def test_an_index_is_built_only_where_asked(pg_url, tmp_path, index):
    X = clustered(50, 8, seed=1)
    with PgVectorStore(tmp_path, "plain", dsn=pg_url) as s:
        s.upsert([str(i) for i in range(50)], X)
    with PgVectorStore(tmp_path, "fast", dsn=pg_url, index=index, lists=2) as s:
        s.upsert([str(i) for i in range(50)], X)
        assert s.search(X[7], k=1)[0][0].id == "7"
    with psycopg.connect(pg_url) as db:
        rows = db.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE tablename LIKE 'pev_%%' "
            "AND indexdef NOT LIKE '%%UNIQUE%%'"
        ).fetchall()
    assert [r[0] for r in rows] == ["pev_fast"]
    assert f"USING {index}" in rows[0][1] and "vector_cosine_ops" in rows[0][1]


# ---- SQL injection battery ---------------------------------------------------------------
HOSTILE = [
    "'; DROP TABLE privembed_collections; --",
    'x"; DROP TABLE "pev_col"; --',
    "a' OR '1'='1",
    "Robert'); DELETE FROM pev_col; --",
    "/* comment */ --",
    "%s %(x)s $1 ?",
    "\\' \\\" \\\\",
    "é中文😀\u202e\u200b",
    "x" * 20_000,
]  # fmt: skip


def _tables(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as db:
        names = [
            r[0]
            for r in db.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
            ).fetchall()
        ]
        return [(n, db.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]) for n in names]


def test_hostile_ids_and_metadata_are_stored_as_data(pg_url, tmp_path):
    X = clustered(len(HOSTILE), 4, seed=2)
    with PgVectorStore(tmp_path, "col", dsn=pg_url) as s:
        meta = [{h[:200] or "k": h, "n": i} for i, h in enumerate(HOSTILE)]
        s.upsert(HOSTILE, X, meta)
        before = _tables(pg_url)
        for i, h in enumerate(HOSTILE):
            hit = s.search(X[i], k=1)[0][0]
            assert hit.id == h and hit.metadata == meta[i]
        assert s.count() == len(HOSTILE)
    assert _tables(pg_url) == before == [("pev_col", len(HOSTILE)), ("privembed_collections", 1)]


@pytest.mark.parametrize(
    "name",
    [*HOSTILE, "pev", "ab", "a" * 51, "col;", "col--", "col name", "col\x00x", "Col.v1-x"],
)
def test_hostile_collection_names_are_refused_before_any_sql(pg_url, tmp_path, name):
    if name == "Col.v1-x":  # a valid name: quoted, so case and punctuation are kept
        with PgVectorStore(tmp_path, name, dsn=pg_url) as s:
            s.upsert(["a"], np.ones((1, 2)))
        assert ("pev_Col.v1-x", 1) in _tables(pg_url)
        return
    if name == "pev":  # valid as a name; its table is pev_pev, nothing clashes
        with PgVectorStore(tmp_path, name, dsn=pg_url) as s:
            s.upsert(["a"], np.ones((1, 2)))
        assert ("pev_pev", 1) in _tables(pg_url)
        return
    with pytest.raises(ValueError, match="collection") as info:
        PgVectorStore(tmp_path, name, dsn=pg_url)
    assert "\n" not in str(info.value)
    assert _tables(pg_url) == []  # not even the registry: refused before connecting


@pytest.mark.parametrize("bad", ["a\x00b", "\udcff"])
def test_values_postgres_cannot_hold_are_one_line_data_errors(pg_url, tmp_path, bad):
    with PgVectorStore(tmp_path, "col", dsn=pg_url) as s:
        s.upsert(["ok"], np.ones((1, 2)))
        for call in (
            lambda: s.upsert([bad], np.ones((1, 2))),
            lambda: s.upsert(["x"], np.ones((1, 2)), [{"k": bad}]),
            lambda: s.upsert(["x"], np.ones((1, 2)), [{bad: 1}]),
        ):
            with pytest.raises(DataError, match="cannot upsert") as info:
                call()
            assert "\n" not in str(info.value)
        assert s.count() == 1  # nothing half-written


# ---- the DSN and its password ------------------------------------------------------------
def test_the_password_is_never_shown(pg_server, pg_database, pg_url, tmp_path):
    dsn = pg_url.replace("postgres:@", f"postgres:{SECRET}@", 1)
    with PgVectorStore(tmp_path, "col", dsn=dsn) as s:
        s.upsert(["a"], np.ones((1, 2)))
        shown = repr(s) + str(s.info) + s.where
    assert SECRET not in shown and "postgres:***@" in shown
    _postgres.allow_connections(pg_server, pg_database, False)
    try:
        with pytest.raises(ConnectionError, match="cannot connect") as info:
            PgVectorStore(tmp_path, "col", dsn=dsn, create=False)
        assert SECRET not in str(info.value) and "\n" not in str(info.value)
    finally:
        _postgres.allow_connections(pg_server, pg_database, True)
    with pytest.raises(ConnectionError) as info2:
        PgVectorStore(tmp_path, "col", dsn=f"host=/nonexistent password={SECRET} dbname=x")
    assert SECRET not in str(info2.value)


def test_no_dsn_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("PRIVEMBED_PG_DSN", raising=False)
    with pytest.raises(ValueError, match="PRIVEMBED_PG_DSN"):
        PgVectorStore(tmp_path, "col")


def test_a_lost_connection_is_one_line(pg_server, pg_database, pg_url, tmp_path):
    with PgVectorStore(tmp_path, "col", dsn=pg_url) as s:
        s.upsert(["a"], np.ones((1, 2)))
        _postgres.terminate(pg_server, pg_database)
        with pytest.raises(ConnectionError, match=r"cannot (count|search)") as info:
            s.search(np.ones(2), k=1)
        assert "\n" not in str(info.value)


def test_scores_are_cosines_and_inner_products(pg_url, tmp_path):
    with PgVectorStore(tmp_path, "cos", dsn=pg_url) as s:
        s.upsert(["a"], np.array([[3.0, 4.0]]))
        assert s.search(np.array([1.0, 0.0]), k=1)[0][0].score == pytest.approx(0.6, abs=1e-6)
    with PgVectorStore(tmp_path, "ipc", dsn=pg_url, metric="ip") as s:
        s.upsert(["a"], np.array([[3.0, 4.0]]))
        got = s.search(np.array([2.0, 0.0]), k=1)[0][0].score
        assert got == pytest.approx(6.0, rel=1e-6) and not math.isnan(got)


def test_langchain_retriever_over_pgvector(pg_url, tmp_path, monkeypatch):
    from langchain_core.documents import Document

    from privembed.integrations.langchain import PrivateRetriever

    monkeypatch.setenv("PRIVEMBED_PG_DSN", pg_url)
    X = clustered(200, 32, seed=9)
    Q = near_copies(X, scale=0.1, seed=10)
    ids = [f"r{i}" for i in range(len(X))]
    with ProtectedCollection.open("pgvector", tmp_path, "col", key=KEY, payloads=True,
                                  mechanism=get_mechanism("laplace", epsilon=20.0)) as col:  # fmt: skip
        col.add(ids, X, texts=[f"text of r{i}" for i in range(len(X))])

    class _Searcher(Searcher):
        def embed(self, queries):  # the query text names the row of Q to use
            return Q[[int(q[1:]) for q in queries]]

    with _Searcher("pgvector", tmp_path, "col", key=KEY) as s:
        docs = PrivateRetriever(searcher=s, k=3, rerank=100).invoke("q7")
    assert all(isinstance(d, Document) for d in docs) and len(docs) == 3
    assert docs[0].metadata["id"] == "r7" and docs[0].page_content == "text of r7"
    assert docs[0].metadata["score_kind"] == "exact cosine"


def test_build_index_after_a_bulk_load(pg_url, tmp_path):
    X = clustered(60, 8, seed=4)
    with PgVectorStore(tmp_path, "bulk", dsn=pg_url) as s:
        with pytest.raises(ValueError, match="empty: upsert data first"):
            s.build_index("hnsw")
        s.upsert([str(i) for i in range(60)], X)
        s.build_index("hnsw")
        with pytest.raises(ValueError, match="has a hnsw index already"):
            s.build_index("ivfflat")
        with pytest.raises(ValueError, match="index must be one of"):
            s.build_index("btree")
        s.upsert(["new"], X[:1] * 2)  # kept up to date
        assert {h.id for h in s.search(X[0], k=2)[0]} == {"0", "new"}
    with PgVectorStore(tmp_path, "bulk", dsn=pg_url, create=False) as s:
        assert s.info["index"] == "hnsw"
    with psycopg.connect(pg_url) as db:
        defs = [r[0] for r in db.execute("SELECT indexdef FROM pg_indexes WHERE indexname = "
                                          "'pev_bulk_hnsw'").fetchall()]  # fmt: skip
    assert len(defs) == 1 and "USING hnsw" in defs[0]
