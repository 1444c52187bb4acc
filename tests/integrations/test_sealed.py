"""The sealed mode (issue 37.2): payloads only in the store, exact ranking on the client.

For FAISS, Chroma, Qdrant and pgvector: the top 10 of a sealed collection is the exact clean top
10; the store holds one constant placeholder vector per record and is never similarity-searched;
a wrong key, a tampered or a missing payload is refused in one line and nothing is written; the
encrypted local cache is loaded without fetching a payload while the store is unchanged, and
rebuilt once it changes. Then the local index and its cache alone, the bad inputs, the LangChain
retriever and the command line.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import psycopg
import pytest

from privembed import DataError, get_mechanism
from privembed.integrations.collection import ProtectedCollection, Searcher
from privembed.keys.payload import PayloadCodec, PayloadError, payload_size
from privembed.search import sealed
from privembed.search.sealed import (
    ID_BYTES,
    PLACEHOLDER,
    SealedIndex,
    sealed_fetch_bytes,
    stamp,
)

from .conftest import KEY, brute_topk, clustered

STORES = ["faiss", "chroma", "qdrant", "pgvector"]
OTHER_KEY = bytes(range(1, 33))
N, D = 300, 32


def _options(kind: str, request: pytest.FixtureRequest) -> dict[str, object]:
    """Store options: pgvector gets a fresh database (tests/_postgres.py), the others none."""
    if kind == "pgvector":
        return {"dsn": request.getfixturevalue("pg_url")}
    return {}


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    X = clustered(n, d, seed=seed)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def _open(kind, path, options, **kw) -> ProtectedCollection:
    return ProtectedCollection.open(kind, path, "col", store_options=options, **kw)


def _stored_vectors(kind: str, col: ProtectedCollection, options) -> np.ndarray:
    """Every vector the store holds, read back from the store itself (not through privembed's
    search): what the store holder sees."""
    s = col.store
    if kind == "faiss":
        return s._index.reconstruct_n(0, s._index.ntotal)
    if kind == "chroma":
        return np.asarray(s._col.get(include=["embeddings"])["embeddings"])
    if kind == "qdrant":
        points, _ = s._client.scroll("col", limit=10_000, with_vectors=True)
        return np.asarray([p.vector for p in points])
    with psycopg.connect(options["dsn"]) as db:
        rows = db.execute("SELECT embedding::text FROM pev_col").fetchall()
    return np.asarray([json.loads(r[0]) for r in rows])


def _counting(col: ProtectedCollection) -> list[int]:
    """Count the store's payload fetches (ids per call)."""
    calls: list[int] = []
    fetch = col.store.payloads

    def counted(ids):
        calls.append(len(ids))
        return fetch(ids)

    col.store.payloads = counted  # type: ignore[method-assign]
    return calls


def _no_store_search(col: ProtectedCollection) -> None:
    def refuse(*a, **kw):
        raise AssertionError("a sealed collection was similarity-searched in the store")

    col.store.search = refuse  # type: ignore[method-assign]


@pytest.mark.parametrize("kind", STORES)
def test_sealed_collection_in_every_store(tmp_path, kind, request):
    options = _options(kind, request)
    X = _unit(N, D, seed=11)
    Q = _unit(25, D, seed=12)
    ids = [f"r{i}" for i in range(N)]
    texts = [f"note {i}" for i in range(N)]
    path = tmp_path / "db"
    with _open(kind, path, options, mechanism="sealed", key=KEY) as col:
        held = col.add(ids, X, [{"n": i} for i in range(N)], texts=texts)
        np.testing.assert_array_equal(held, np.tile(PLACEHOLDER, (N, 1)))
        # the store holds the placeholder only, the same for every record
        stored = _stored_vectors(kind, col, options)
        assert stored.shape == (N, len(PLACEHOLDER))
        np.testing.assert_array_equal(stored, np.tile(PLACEHOLDER, (N, 1)))
        info = col.store.info
        assert info["protection"]["sealed"] is True
        assert info["protection"]["guarantee"]["kind"] == "sealed"
        assert info["protection"]["guarantee"]["differential_privacy"] is False
        assert "no vector in the store" in info["protection"]["guarantee_text"]
        sizes = {len(b) for b in col.store.payloads(ids)}  # padded: the texts' lengths hidden
        assert len(sizes) == 1
        assert col.store.store_ids() == sorted(ids)

    # a new collection object: every payload fetched (in batches), ranked exactly here
    with _open(kind, path, options, key=KEY) as col:
        _no_store_search(col)
        calls = _counting(col)
        hits = col.query(Q, k=10)
        assert sum(calls) == N and max(calls) <= sealed.FETCH_BATCH
        assert col.sealed_cache_path.exists()
        again = col.query(Q[:3], k=10)  # kept in memory: nothing fetched again
        assert sum(calls) == N
    assert [[h.id for h in hs] for hs in hits] == [
        [f"r{i}" for i in row] for row in brute_topk(X, Q, 10)
    ]
    assert [[h.id for h in hs] for hs in again] == [[h.id for h in hs] for hs in hits[:3]]
    top = hits[0][0]
    i = int(top.id[1:])
    assert top.score == pytest.approx(float(Q[0].astype(np.float64) @ X[i]), abs=1e-6)
    assert top.text == f"note {i}" and top.metadata == {"n": i} and top.payload is None

    # the encrypted cache: a second object loads it without fetching a payload
    assert col.sealed_cache_path.exists()
    with _open(kind, path, options, key=KEY) as col:
        _no_store_search(col)
        calls = _counting(col)
        cached = col.query(Q, k=10)
        assert calls == []
    assert [[h.id for h in hs] for hs in cached] == [[h.id for h in hs] for hs in hits]

    # the wrong key: refused when the collection is opened, nothing written
    before = col.sealed_cache_path.read_bytes()
    with pytest.raises(PayloadError, match="wrong key") as err:
        _open(kind, path, options, key=OTHER_KEY)
    assert err.value.cause == "wrong-key" and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"is sealed: .*give the key \(--key-file\)"):
        _open(kind, path, options)
    assert col.sealed_cache_path.read_bytes() == before

    # a changed store (a record added) makes the cache stale: fetched again, the new record found
    extra = _unit(1, D, seed=13)
    with _open(kind, path, options, key=KEY) as col:
        col.add(["new"], extra, texts=["the new note"])
    with _open(kind, path, options, key=KEY) as col:
        calls = _counting(col)
        got = col.query(extra, k=1)[0][0]
        assert sum(calls) == N + 1
    assert (got.id, got.text) == ("new", "the new note")
    assert got.score == pytest.approx(1.0, abs=1e-6)

    # the store tampers with a payload: refused in one line, the cache left as it was
    victim = "r7"
    with _open(kind, path, options, key=KEY) as col:
        blob = bytearray(col.store.payloads([victim])[0])
        blob[-1] ^= 1
        col.store.upsert([victim], [PLACEHOLDER], payloads=[bytes(blob)])
        col.store.update_info(sealed_generation="changed by the store")  # or the cache is used
    before = col.sealed_cache_path.read_bytes()
    with _open(kind, path, options, key=KEY) as col:
        with pytest.raises(PayloadError, match="failed authentication") as err:
            col.query(Q[:1], k=10)
    assert err.value.cause == "tampered" and "\n" not in str(err.value)
    assert col.sealed_cache_path.read_bytes() == before

    # ... or drops it
    with _open(kind, path, options, key=KEY) as col:
        col.store.upsert([victim], [PLACEHOLDER])  # the record without its payload
        with pytest.raises(PayloadError, match=f"record '{victim}' has no payload") as err:
            col.query(Q[:1], k=10)
    assert err.value.cause == "missing"
    assert col.sealed_cache_path.read_bytes() == before


def test_a_store_changed_behind_privembed_is_fetched_again(tmp_path):
    """A record upserted through the store itself (no new generation): the count differs."""
    X = _unit(50, 8, seed=1)
    with _open("faiss", tmp_path, {}, mechanism="sealed", key=KEY) as col:
        col.add([f"r{i}" for i in range(50)], X)
        col.query(X[:1], k=1)
        spare = col.store.payloads(["r3"])[0]
        assert col.sealed_cache_path.exists()
        col.store.upsert(["zz"], [PLACEHOLDER], payloads=[spare])  # r3's payload, moved
    with _open("faiss", tmp_path, {}, key=KEY) as col:
        with pytest.raises(PayloadError, match="does not belong to record 'zz'"):
            col.query(X[:1], k=1)


def test_rerank_and_recall_are_accepted_and_ignored_protect_query_is_refused(tmp_path):
    X = _unit(40, 8, seed=2)
    with _open("faiss", tmp_path, {}, mechanism="sealed", key=KEY) as col:
        col.add(list(range(40)), X)
        plain = col.query(X[:5], k=3)
        assert col.query(X[:5], k=3, rerank=1) == plain
        assert col.query(X[:5], k=3, recall=0.9) == plain
        assert plain[2][0].id == "2"
        assert col.store.record_id(plain[2][0].id) == 2  # int ids typed back
        with pytest.raises(ValueError, match="queries never leave the client"):
            col.query(X[:1], k=3, protect_query=get_mechanism("laplace", epsilon=5.0))
        with pytest.raises(ValueError, match="releases no vector"):
            col.add(["x"], X[:1], ledger=object())
        with pytest.raises(ValueError, match="add\\(\\) them instead"):
            col.add_released(["x"], X[:1])
        with pytest.raises(ValueError, match="no k' to plan"):
            col.save_profile(X[:3], X)
        with pytest.raises(DataError, match="dimension"):
            col.add(["x"], _unit(1, 9, seed=3))
        assert col.store.count() == 40


def test_sealed_and_other_collections_do_not_mix(tmp_path):
    X = _unit(10, 8, seed=4)
    with _open("faiss", tmp_path, {}, mechanism="none") as col:
        col.add(list(range(10)), X)
    with pytest.raises(ValueError, match="holds vectors from unprotected vectors"):
        _open("faiss", tmp_path, {}, mechanism="sealed", key=KEY)
    with _open("faiss", tmp_path / "s", {}, mechanism="sealed", key=KEY) as col:
        col.add(list(range(10)), X)
    with pytest.raises(ValueError, match="holds vectors from sealed payloads"):
        _open("faiss", tmp_path / "s", {}, mechanism=get_mechanism("laplace", epsilon=5.0), key=KEY)
    with pytest.raises(ValueError, match="payloads=False does not apply"):
        _open("faiss", tmp_path / "s", {}, key=KEY, payloads=False)


def test_without_the_cache_nothing_is_written_and_every_object_fetches(tmp_path):
    X = _unit(30, 8, seed=5)
    with _open("chroma", tmp_path, {}, mechanism="sealed", key=KEY, sealed_cache=False) as col:
        col.add([f"r{i}" for i in range(30)], X)
        col.query(X[:1], k=2)
        assert not col.sealed_cache_path.exists()
    with _open("chroma", tmp_path, {}, key=KEY, sealed_cache=False) as col:
        calls = _counting(col)
        col.query(X[:1], k=2)
        assert sum(calls) == 30


def test_a_tampered_cache_is_refused(tmp_path):
    X = _unit(20, 8, seed=6)
    with _open("faiss", tmp_path, {}, mechanism="sealed", key=KEY) as col:
        col.add([f"r{i}" for i in range(20)], X)
        col.query(X[:1], k=1)
        path = col.sealed_cache_path
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    with _open("faiss", tmp_path, {}, key=KEY) as col:
        with pytest.raises(PayloadError, match=r"cache .* failed authentication") as err:
            col.query(X[:1], k=1)
    assert "\n" not in str(err.value) and "delete it to rebuild" in str(err.value)
    assert path.read_bytes() == bytes(data)  # refused, not overwritten


# ---- the local index and its cache on their own ------------------------------------------------
def _sealed_index(n: int = 200, d: int = 16, seed: int = 0, **kw) -> SealedIndex:
    codec = PayloadCodec(KEY)
    X = clustered(n, d, seed=seed)
    ids = [f"r{i:04d}" for i in range(n)]
    blobs = dict(zip(ids, codec.seal_many(X, ids=ids, collection="c", **kw), strict=True))
    return SealedIndex.fetch(ids, lambda chunk: [blobs[i] for i in chunk], codec, "c", batch=64)


def test_the_local_search_is_the_exact_top_k():
    index = _sealed_index(500, 24, seed=7)
    Q = clustered(40, 24, seed=8)
    exact = brute_topk(index.vectors, Q, 15)
    got = index.search(Q, 15)
    assert [[r for r, _ in row] for row in got] == exact
    Q64 = Q.astype(np.float64)
    S = (Q64 / np.linalg.norm(Q64, axis=1, keepdims=True)) @ (
        index.vectors / np.linalg.norm(index.vectors.astype(np.float64), axis=1, keepdims=True)
    ).T
    for q, row in enumerate(got):
        np.testing.assert_allclose([s for _, s in row], S[q, exact[q]], atol=1e-12)
    assert len(index.search(Q[:1], 10_000)[0]) == 500  # k beyond the corpus: all of it


def test_ties_go_to_the_earlier_row_and_an_empty_index_finds_nothing():
    codec = PayloadCodec(KEY)
    X = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0]], dtype=np.float32)
    blobs = codec.seal_many(X, ids=["a", "b", "c"], collection="c")
    index = SealedIndex.fetch(["a", "b", "c"], lambda ch: blobs, codec, "c")
    assert index.search([[1.0, 0.0]], 2) == [[(1, 1.0), (2, 1.0)]]
    empty = SealedIndex.fetch([], lambda ch: [], codec, "c")
    assert len(empty) == 0 and empty.search([[1.0, 0.0]], 3) == [[]]


def test_the_cache_round_trips_and_refuses_a_stale_or_foreign_stamp(tmp_path):
    index = _sealed_index(
        60, 8, texts=[f"t{i}" if i % 2 else None for i in range(60)],
        metadatas=[{"i": i} if i % 3 else None for i in range(60)],
    )  # fmt: skip
    path = tmp_path / "c.cache"
    now = stamp(index.ids, "g1")
    index.save(path, key=KEY, collection="c", current=now)
    back = SealedIndex.load(path, key=KEY, collection="c", current=now)
    assert back is not None and back.ids == index.ids
    np.testing.assert_array_equal(back.vectors, index.vectors)
    assert back.texts == index.texts and back.metadata == index.metadata
    assert SealedIndex.load(path, key=KEY, collection="c", current=stamp(index.ids, "g2")) is None
    assert SealedIndex.load(path, key=KEY, collection="other", current=now) is None
    assert SealedIndex.load(tmp_path / "none", key=KEY, collection="c", current=now) is None
    with pytest.raises(PayloadError, match="failed authentication"):
        SealedIndex.load(path, key=OTHER_KEY, collection="c", current=now)


def test_a_cache_in_chunks_refuses_a_dropped_or_reordered_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(sealed, "_CHUNK", 1000)
    index = _sealed_index(60, 8)
    path = tmp_path / "c.cache"
    now = stamp(index.ids, None)
    index.save(path, key=KEY, collection="c", current=now)
    back = SealedIndex.load(path, key=KEY, collection="c", current=now)
    assert back is not None and back.ids == index.ids
    data = path.read_bytes()
    chunk = 1000 + 16  # a chunk's ciphertext and tag
    body_start = 9 + struct.unpack_from("<I", data, 5)[0] + 8  # header, then the nonce prefix
    body = data[body_start:]
    assert len(body) > 3 * chunk
    for bad in (
        data[: body_start + 2 * chunk],  # the last chunks dropped
        data[:body_start] + body[chunk : 2 * chunk] + body[:chunk] + body[2 * chunk :],
    ):
        path.write_bytes(bad)
        with pytest.raises(PayloadError, match="failed authentication"):
            SealedIndex.load(path, key=KEY, collection="c", current=now)


def test_stamps_follow_the_ids_their_count_and_the_generation():
    base = stamp(["a", "b"], "g")
    assert base != stamp(["a", "b", "c"], "g")
    assert base != stamp(["ab"], "g") != stamp(["a", "b"], None)
    assert base != stamp(["b", "a"], "g")


def test_the_fetch_cost_is_what_a_full_fetch_reads():
    codec = PayloadCodec(KEY)
    X = clustered(20, 384, seed=0)
    blobs = codec.seal_many(X, ids=[f"r{i}" for i in range(20)], collection="c")
    assert sealed_fetch_bytes(20, 384) == sum(len(b) for b in blobs) + 20 * ID_BYTES
    assert sealed_fetch_bytes(20, 384, cached=True) == 0
    assert sealed_fetch_bytes(5, 384, text_bytes=100) == 5 * (
        payload_size(384, text="x" * 100) + ID_BYTES
    )


@pytest.mark.parametrize("d", [64, 384, 768])
def test_the_fetch_cost_is_the_one_advice_weighs(d):
    """evaluation.cost prices the sealed mode's fetch itself; the two must agree."""
    from privembed.evaluation.cost import Rates, sealed_cost

    rates = Rates(open_ms=0.002, scan_ms_per_mdim=0.5, source="given")
    cached = sealed_cost(n=5000, d=d, rates=rates)
    uncached = sealed_cost(n=5000, d=d, rates=rates, client_cache=False)
    assert cached.sync_bytes == uncached.bytes == sealed_fetch_bytes(5000, d)
    assert cached.bytes == sealed_fetch_bytes(5000, d, cached=True) == 0


# ---- front ends ------------------------------------------------------------------------------
def test_langchain_retriever_on_a_sealed_collection(tmp_path):
    from langchain_core.documents import Document

    from privembed.integrations.langchain import PrivateRetriever

    X = _unit(200, 16, seed=9)
    Q = _unit(10, 16, seed=10)
    with _open("qdrant", tmp_path, {}, mechanism="sealed", key=KEY) as col:
        col.add([f"r{i}" for i in range(200)], X, texts=[f"text of r{i}" for i in range(200)])

    class _Searcher(Searcher):
        def embed(self, queries):  # the query text names the row of Q to use
            return Q[[int(q[1:]) for q in queries]]

    exact = brute_topk(X, Q, 4)
    with _Searcher("qdrant", tmp_path, "col", key=KEY) as s:
        for q in (3, 7):
            docs = PrivateRetriever(searcher=s, k=4).invoke(f"q{q}")  # recall=0.95: ignored
            assert all(isinstance(d, Document) for d in docs)
            assert [d.metadata["id"] for d in docs] == [f"r{i}" for i in exact[q]]
            assert docs[0].page_content == f"text of r{exact[q][0]}"
            assert docs[0].metadata["score_kind"] == "exact cosine"


def test_cli_index_sealed_and_search(tmp_path):
    from typer.testing import CliRunner

    from privembed.cli import app
    from privembed.data.io import write_embeddings
    from privembed.keys.keyed import keygen

    key = tmp_path / "k.key"
    keygen(key)
    X = _unit(N, D, seed=14)
    Q = _unit(5, D, seed=15)
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=[f"r{i}" for i in range(N)])
    qf = tmp_path / "q.npz"
    write_embeddings(qf, Q)
    db = tmp_path / "db"
    runner = CliRunner()

    # mechanism options with --sealed, or no key: one line, nothing written
    for extra, message in (
        (["-m", "laplace", "--epsilon", "5", "--key-file", str(key)], "--mechanism, --epsilon do"),
        (["--seed", "3", "--key-file", str(key)], "--seed does not apply"),
        ([], "give --key-file"),
    ):
        r = runner.invoke(app, ["index", str(src), "--store", "faiss", "--path", str(db),
                                "--sealed", *extra])  # fmt: skip
        assert r.exit_code != 0 and message in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and not db.exists()

    r = runner.invoke(app, ["index", str(src), "--store", "faiss", "--path", str(db), "--sealed",
                            "--key-file", str(key)])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "sealed (AES-256-GCM, padded): no vector in the store" in r.output

    r = runner.invoke(app, ["search", "--query-embeddings", str(qf), "--store", "faiss",
                            "--path", str(db), "--key-file", str(key), "-k", "10", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [[h["id"] for h in row["hits"]] for row in rows] == [
        [f"r{i}" for i in row] for row in brute_topk(X, Q, 10)
    ]
    assert {row["score_kind"] for row in rows} == {"exact cosine"}
    assert (db / ".privembed-sealed-privembed.cache").exists()

    r = runner.invoke(app, ["search", "--query-embeddings", str(qf), "--store", "faiss",
                            "--path", str(db), "-k", "3"])  # fmt: skip
    assert r.exit_code != 0 and "is sealed" in r.output and "--key-file" in r.output
    other = tmp_path / "other.key"
    keygen(other)
    r = runner.invoke(app, ["search", "--query-embeddings", str(qf), "--store", "faiss",
                            "--path", str(db), "--key-file", str(other), "-k", "3"])  # fmt: skip
    assert r.exit_code != 0 and "wrong key" in r.output
