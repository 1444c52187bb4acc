"""Vector stores against real embedded databases (Chroma, Qdrant local mode, FAISS) in temp dirs.

* the adapter contract, the same for every store: upsert/replace, count, search order and
  scores, metadata, info persisted across reopening, one-line errors for bad input;
* protected collections: an unprotected (and a near-noiseless) run returns exactly the cosine
  nearest neighbours; retrieval degrades as epsilon shrinks (monotone within a stated
  tolerance, fixed keys); the projection's query-side treatment beats a naive plain query.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privembed import DataError, get_mechanism
from privembed.integrations.collection import ProtectedCollection
from privembed.integrations.stores import FaissStore, Hit, open_store
from privembed.keys.ledger import BudgetExceeded, Ledger
from privembed.release import protect

from .conftest import KEY, brute_topk, clustered, cosines, near_copies

STORES = ["chroma", "qdrant", "faiss"]


@pytest.fixture(params=STORES)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---- the adapter contract ---------------------------------------------------------------------
def test_upsert_search_count_and_reopen(kind, tmp_path):
    X = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], dtype=np.float32)
    with open_store(kind, tmp_path / "db", "things") as s:
        assert s.count() == 0 and s.dim is None and s.metric == "cosine"
        s.upsert(["a", "b", "c", "ab"], X, [{"n": 1, "tag": "x"}, None, {"n": 3}, {}])
        assert s.count() == 4 and s.dim == 3
        s.update_info(note="hello")
        hits = s.search(np.array([1.0, 0.05, 0.0]), k=2)
        assert len(hits) == 1 and [h.id for h in hits[0]] == ["a", "ab"]
        assert hits[0][0].score == pytest.approx(1 / math.sqrt(1 + 0.05**2), abs=1e-4)
        assert hits[0][0].metadata == {"n": 1, "tag": "x"}
        # upsert replaces: "a" now points the other way
        s.upsert(["a"], np.array([[0, 0, -1.0]]), [{"n": 9}])
        assert s.count() == 4
        top = s.search(np.array([0.0, 0.0, -1.0]), k=1)[0][0]
        assert (top.id, top.metadata) == ("a", {"n": 9})
        # k larger than the collection: everything, best first
        allhits = s.search(X[:2], k=10)
        assert [len(h) for h in allhits] == [4, 4]
        assert all(isinstance(h, Hit) for h in allhits[0])
        scores = [h.score for h in allhits[0]]
        assert scores == sorted(scores, reverse=True)
    with open_store(kind, tmp_path / "db", "things", create=False) as s:
        assert s.count() == 4 and s.dim == 3 and s.metric == "cosine"
        assert s.info["note"] == "hello" and s.info["store"] == kind
        assert s.search(np.array([0.0, 1.0, 0.0]), k=1)[0][0].id == "b"


def test_inner_product_metric_keeps_norms(kind, tmp_path):
    X = np.array([[1.0, 0.0], [3.0, 0.1]], dtype=np.float32)
    with open_store(kind, tmp_path / "db", "ipcol", metric="ip") as s:
        s.upsert([1, 2], X)  # int ids are stored as strings
        top = s.search(np.array([1.0, 0.0]), k=2)[0]
    assert [h.id for h in top] == ["2", "1"]  # cosine would rank "1" first
    assert top[0].score == pytest.approx(3.0, rel=1e-5)


def test_vectors_come_back_when_asked(kind, tmp_path):
    X = clustered(20, 8)
    X /= np.linalg.norm(X, axis=1, keepdims=True)  # unit rows: the best inner product is itself
    with open_store(kind, tmp_path / "db", "vecs", metric="ip") as s:
        s.upsert([f"r{i}" for i in range(20)], X)
        hits = s.search(X[3], k=1, with_vectors=True)[0]
    assert hits[0].id == "r3"
    np.testing.assert_allclose(hits[0].vector, X[3], rtol=1e-6)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda s: s.upsert(["a", "a"], np.ones((2, 3))), DataError, "unique"),
        (lambda s: s.upsert(["a"], np.ones((2, 3))), DataError, "ids has 1 entries"),
        (lambda s: s.upsert(["a"], np.full((1, 3), np.nan)), DataError, "NaN or inf"),
        (lambda s: s.upsert(["z"], np.ones((1, 4))), DataError, "dimension mismatch"),
        (lambda s: s.upsert(["a"], np.ones((1, 3)), [{"x": [1]}]), TypeError, "metadata values"),
        (lambda s: s.upsert(["a"], np.ones((1, 3)), [{}, {}]), DataError, "metadata has 2"),
        (lambda s: s.search(np.ones(3), k=0), ValueError, "k must be >= 1"),
        (lambda s: s.search(np.ones(5), k=1), DataError, "dimension mismatch"),
        (lambda s: s.update_info(metric="ip"), ValueError, "set by the store"),
    ],
)
def test_bad_input_is_refused(kind, tmp_path, call, exc, match):
    with open_store(kind, tmp_path / "db", "bad") as s:
        s.upsert(["x"], np.ones((1, 3)))
        with pytest.raises(exc, match=match):
            call(s)
        assert s.count() == 1


def test_open_errors(kind, tmp_path):
    with pytest.raises(ValueError, match="collection must be 3-512"):
        open_store(kind, tmp_path / "db", "a/b")
    with pytest.raises(ValueError, match="metric must be one of"):
        open_store(kind, tmp_path / "db", "abc", metric="l2")
    with open_store(kind, tmp_path / "db", "abc") as s:
        s.upsert(["x"], np.ones((1, 3)))
    with pytest.raises(ValueError, match=r"uses metric 'cosine', not 'ip'"):
        open_store(kind, tmp_path / "db", "abc", metric="ip")
    with pytest.raises(ValueError, match=r"has no .* collection 'nope' \(collections: abc\)"):
        open_store(kind, tmp_path / "db", "nope", create=False)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        open_store(kind, f, "abc")


def test_closed_store_refuses(tmp_path):
    s = open_store("faiss", tmp_path, "abc")
    s.close()
    with pytest.raises(ValueError, match="is closed"):
        s.count()


def test_faiss_file_is_atomic_and_approximate_index_cannot_replace(tmp_path):
    with FaissStore(tmp_path, "big", factory="HNSW16") as s:
        s.upsert(["a", "b"], np.eye(2))
        with pytest.raises(ValueError, match="cannot replace existing ids"):
            s.upsert(["a"], np.ones((1, 2)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.faiss.npz"]  # no temp left
    with FaissStore(tmp_path, "big", create=False) as s:
        assert s.info["factory"] == "HNSW16" and s.count() == 2
    (tmp_path / "bad.faiss.npz").write_bytes(b"not a file")
    with pytest.raises(DataError, match="cannot read FAISS store"):
        FaissStore(tmp_path, "bad")


def test_faiss_store_keeps_the_index_it_was_made_with(tmp_path):
    X = np.random.default_rng(0).standard_normal((50, 8))
    with FaissStore(tmp_path, "half", factory="SQfp16") as s:
        s.upsert([f"r{i}" for i in range(50)], X)
        s.upsert(["r1"], X[2:3])  # half precision can replace ids
    with FaissStore(tmp_path, "half", create=False) as s:  # no factory: the one it was made with
        assert s.factory == s.info["factory"] == "SQfp16"
        hits = s.search(X[2], k=2)[0]
        assert {h.id for h in hits} == {"r1", "r2"}
        assert all(abs(h.score - 1.0) < 2e-3 for h in hits)  # fp16 rounding only
    with FaissStore(tmp_path, "half", factory="SQfp16", create=False) as s:
        assert s.count() == 50
    with pytest.raises(ValueError, match="was made with the index 'SQfp16', not 'Flat'"):
        FaissStore(tmp_path, "half", factory="Flat")
    with pytest.raises(ValueError, match="factory must be a FAISS index_factory string"):
        FaissStore(tmp_path, "other", factory="")


# ---- protected collections --------------------------------------------------------------------
def _hit_rate(kind, path, X, Q, mech, k=1, **kw):
    ids = [f"r{i}" for i in range(X.shape[0])]
    with ProtectedCollection.open(kind, path, "col", mechanism=mech, **kw) as col:
        col.add(ids, X)
        hits = col.query(Q, k=k)
    return float(np.mean([h[0].id == ids[i] for i, h in enumerate(hits)])), hits


@pytest.mark.parametrize("kind", ["chroma", "qdrant"])
def test_unprotected_and_near_noiseless_runs_return_the_exact_neighbours(kind, tmp_path):
    # (Qdrant's local mode commits every point to SQLite: the collections stay small.)
    X = clustered(100, 32)
    Q = near_copies(X[:30])
    expected = brute_topk(X, Q, 5)
    true = cosines(X, Q)
    for name, mech, kw in [
        ("plain", "none", {}),
        ("identity", get_mechanism("gaussian", epsilon=1e7, delta=1e-5), {"key": KEY}),
    ]:
        rate, hits = _hit_rate(kind, tmp_path / name, X, Q, mech, k=5, **kw)
        assert rate == 1.0
        got = [[int(h.id[1:]) for h in hs] for hs in hits]
        if name == "plain":
            assert got == [[int(i) for i in e] for e in expected]
        else:  # equal up to near-ties: noise of sigma ~ 4.5e-4 may swap closer cosines
            for qi, (g, e) in enumerate(zip(got, expected, strict=True)):
                np.testing.assert_allclose(true[qi, g], true[qi, e], atol=8 * mech.sigma)


@pytest.mark.parametrize("kind", ["chroma", "qdrant"])
def test_retrieval_degrades_as_epsilon_shrinks(kind, tmp_path):
    # 100 records in d=32; queries are near copies. Hit@1 is deterministic (keyed noise); the
    # tolerance for "monotone" is 2 binomial standard errors at p=1/2 over 100 queries.
    X = clustered(100, 32)
    Q = near_copies(X)
    eps = [1e7, 100.0, 50.0, 10.0]
    rates = [
        _hit_rate(
            kind,
            tmp_path / f"e{j}",
            X,
            Q,
            get_mechanism("gaussian", epsilon=e, delta=1e-5),
            key=KEY,
        )[0]
        for j, e in enumerate(eps)
    ]
    tol = 2 * math.sqrt(0.25 / X.shape[0])
    assert rates[0] == 1.0
    for a, b in itertools.pairwise(rates):
        assert b <= a + tol, rates
    assert rates[-1] < 0.5 and rates[0] - rates[-1] > 0.5, rates


def _own_scores(kind, path, X, Q, mech):
    """Score of each query's own record (all hits requested), calibrated as returned."""
    ids = [f"r{i}" for i in range(X.shape[0])]
    with ProtectedCollection.open(kind, path, "col", mechanism=mech, key=KEY) as col:
        col.add(ids, X)
        hits = col.query(Q, k=X.shape[0])
        scale = col.treatment.score_scale(X.shape[1])
    own = np.array([next(h.score for h in hs if h.id == ids[i]) for i, hs in enumerate(hits)])
    return own, scale


@pytest.mark.parametrize(
    "mech",
    [
        get_mechanism("gaussian", epsilon=30.0, delta=1e-5),
        get_mechanism("laplace", epsilon=20.0),
        get_mechanism("purkayastha", epsilon=20.0),
    ],
    ids=lambda m: m.name,
)
def test_scores_are_unbiased_for_the_clean_cosine(mech, tmp_path):
    # Each query's own record: E[calibrated score] = clean cosine (isotropic noise, unit
    # inputs). Records have independent noise, so the mean is within 4.4 standard errors.
    X = clustered(150, 32)
    Q = near_copies(X)
    clean = np.diag(cosines(X, Q))
    own, scale = _own_scores("faiss", tmp_path, X, Q, mech)
    assert scale > 1.5  # the raw cosines are clearly shrunk at these epsilons
    err = own - clean
    se = err.std(ddof=1) / np.sqrt(err.size)
    assert abs(err.mean()) < 4.4 * se, (err.mean(), se)
    assert (own / scale).mean() < clean.mean() - 10 * se  # raw scores: biased low


def test_projection_collection_uses_the_public_projection_for_queries(tmp_path):
    X = clustered(200, 64)
    Q = near_copies(X)
    # record-level projection needs a large epsilon for ranking (its sensitivity is 2||P||_2)
    mech = get_mechanism("projection", k=48, epsilon=200.0, delta=1e-5)
    rate, _ = _hit_rate("chroma", tmp_path / "p", X, Q, mech, key=KEY)
    with open_store("chroma", tmp_path / "p", "col", create=False) as s:
        assert s.metric == "cosine"
        info = s.info
    assert info["protection"]["mechanism"]["mechanism"] == "projection"
    assert info["dim_in"] == 64 and info["dim"] == 48
    # the treatment (P q, no noise) against an unprojected truncated query: far better
    Y = protect(X, mech, ids=[f"r{i}" for i in range(200)], key=KEY)
    wrong = float(np.mean(np.argmax(Q[:, :48] @ Y.T, axis=1) == np.arange(200)))
    assert rate > 0.6 and wrong < 0.1, (rate, wrong)
    own, _scale = _own_scores("faiss", tmp_path / "f", X, Q, mech)
    clean = np.diag(cosines(X, Q))
    # unbiased for cos(Pq, Px): the JL distortion of k=48 adds spread, not bias
    assert abs((own - clean).mean()) < 4.4 * (own - clean).std(ddof=1) / np.sqrt(200)


def test_mahalanobis_and_unnormalised_inputs_get_raw_cosines(tmp_path):
    X = clustered(40, 8)
    for mech in [
        get_mechanism("mahalanobis", epsilon=50.0, mask=[1, 1, 0, 0, 0, 0, 0, 0]),
        get_mechanism("gaussian", epsilon=50.0, delta=1e-5, input_norm="clip"),
    ]:
        with ProtectedCollection.open("faiss", tmp_path, mech.name, mechanism=mech) as col:
            assert not col.treatment.calibrated
            assert col.treatment.score_scale(8) == 1.0
            col.add(range(40), X)
            assert all(-1.0 <= h.score <= 1.0 + 1e-6 for h in col.query(X[:3], k=5)[0])


def test_collection_records_and_enforces_its_configuration(tmp_path):
    X = clustered(20, 8)
    ids = [f"r{i}" for i in range(20)]
    g = get_mechanism("gaussian", epsilon=5.0, delta=1e-5)
    with ProtectedCollection.open(
        "chroma", tmp_path, "col", mechanism=g, key=KEY, embedding_model="toy"
    ) as col:
        col.add(ids, X, [{"i": i} for i in range(20)])
    with ProtectedCollection(open_store("chroma", tmp_path, "col", create=False)) as col:
        assert col.embedding_model == "toy"
        assert col.protection["key_id"] and col.protection["mechanism"] == g.config
        hit = col.query(X[:2], k=1)[0][0]
        assert hit.metadata == {"i": int(hit.id[1:])}
        with pytest.raises(ValueError, match="add_released"):
            col.add(ids, X)
    other = get_mechanism("gaussian", epsilon=6.0, delta=1e-5)
    with pytest.raises(ValueError, match="mixing them makes scores incomparable"):
        ProtectedCollection.open("chroma", tmp_path, "col", mechanism=other)
    with pytest.raises(ValueError, match="holds embeddings of model 'toy', not 'other'"):
        ProtectedCollection.open("chroma", tmp_path, "col", mechanism=g, embedding_model="other")
    with pytest.raises(ValueError, match="give a mechanism"):
        ProtectedCollection(open_store("chroma", tmp_path, "fresh"))
    with ProtectedCollection(open_store("chroma", tmp_path, "col", create=False)) as col:
        with pytest.raises(DataError, match="query has dimension 5"):
            col.query(np.ones(5))


def test_keyed_reindexing_is_idempotent_and_the_ledger_counts_it_free(tmp_path):
    X = clustered(30, 8)
    ids = [f"r{i}" for i in range(30)]
    g = get_mechanism("gaussian", epsilon=5.0, delta=1e-5)
    led = Ledger(tmp_path / "ledger.db", budget_epsilon=6.0, budget_delta=1e-4)
    with ProtectedCollection.open("faiss", tmp_path, "col", mechanism=g, key=KEY) as col:
        Y1 = col.add(ids, X, ledger=led)
        Y2 = col.add(ids, X, ledger=led)  # same key, same config: identical and free
        np.testing.assert_array_equal(Y1, Y2)
        assert col.store.count() == 30
    fresh = get_mechanism("gaussian", epsilon=5.0, delta=1e-5)
    with ProtectedCollection.open("faiss", tmp_path, "col2", mechanism=fresh) as col:
        with pytest.raises(BudgetExceeded, match="30 record"):
            col.add(ids, X, ledger=led)  # a fresh (unkeyed) release would pass the budget
        assert col.store.count() == 0  # nothing was sent
    spent = {s.record_id: s for s in led.spent()}
    assert spent["s:r0"].releases == 2 and spent["s:r0"].free_releases == 1
    led.close()


# ---- payloads: stored beside the vectors, read by id ------------------------------------------
def test_payloads_are_read_by_id_in_every_store(kind, tmp_path):
    X = np.eye(4, dtype=np.float32) + 0.1
    blobs = [bytes([i]) * (50 + i) for i in range(4)]
    with open_store(kind, tmp_path / "db", "things") as s:
        assert s.payloads(["a"]) == [None]  # nothing stored yet
        s.upsert(["a", "b", "c", "d"], X, [{"n": 1}, None, None, None], payloads=blobs)
        assert s.payloads(["c", "nope", "a"]) == [blobs[2], None, blobs[0]]
        hit = s.search(X[1], k=1)[0][0]
        assert (hit.id, hit.payload, hit.metadata) == ("b", blobs[1], {})
        bare = s.search(X[0], k=1, with_payloads=False)[0][0]  # ids and scores: fetch later
        assert (bare.id, bare.payload, bare.metadata) == ("a", None, {"n": 1})
        s.upsert(["b"], X[1:2], payloads=[b"new"])  # replaced with its payload
        s.upsert(["c"], X[2:3])  # replaced without one: its payload goes, as its metadata
        assert s.payloads(["a", "b", "c"]) == [blobs[0], b"new", None]
        assert s.search(X[0], k=1)[0][0].metadata == {"n": 1}
    with open_store(kind, tmp_path / "db", "things", create=False) as s:
        assert s.payloads(["a", "b", "c", "d"]) == [blobs[0], b"new", None, blobs[3]]


def _faiss_files(path):
    return sorted(p.name for p in path.iterdir())


def test_faiss_store_keeps_payloads_as_raw_bytes_beside_the_index(tmp_path):
    """Layout 2: a record costs its vector plus its payload (no fixed-width strings): at
    d = 384 with 1,585-byte payloads the store is under 2.2x its vectors."""
    rng = np.random.default_rng(0)
    n, d = 600, 384
    X = rng.standard_normal((n, d)).astype(np.float32)
    blobs = [rng.bytes(1585) for _ in range(n)]
    blobs[0] = rng.bytes(9000)  # one long payload must not widen every record
    with FaissStore(tmp_path, "col") as s:
        s.upsert([f"id-{i}" for i in range(n)], X, [{"i": i} for i in range(n)], payloads=blobs)
        assert s.layout == 2 and s.payload_file is not None
        pfile = s.payload_file
    names = _faiss_files(tmp_path)
    assert names == sorted(["col.faiss.npz", pfile.name]), names
    assert pfile.read_bytes() == b"".join(blobs)  # raw, in order, nothing else
    total = (tmp_path / "col.faiss.npz").stat().st_size + pfile.stat().st_size
    vectors = n * d * 4
    assert total <= 2.2 * vectors + 9000, total / vectors
    with FaissStore(tmp_path, "col", create=False) as s:
        assert s.payloads(["id-5", "id-0"]) == [blobs[5], blobs[0]]
        assert s.search(X[7], k=1)[0][0].metadata == {"i": 7}


def test_faiss_payload_file_is_compacted_and_replaced_safely(tmp_path, monkeypatch):
    X = np.eye(3, dtype=np.float32)
    with FaissStore(tmp_path, "col") as s:
        s.upsert(["a", "b", "c"], X, payloads=[b"A" * 100, b"B" * 100, b"C" * 100])
        s.save()
        first = s.payload_file
        for r in range(5):  # replacements append; the old bytes are unreferenced
            s.upsert(["a"], X[:1], payloads=[bytes([r]) * 100])
        s.save()
        assert first.stat().st_size == 800 and s.payload_file == first
        s.compact()
        second = s.payload_file
        assert second != first and not first.exists()
        assert second.stat().st_size == 300
        assert s.payloads(["a", "b", "c"]) == [bytes([4]) * 100, b"B" * 100, b"C" * 100]
        # the automatic rule: a save rewrites once unreferenced bytes pass half the file
        monkeypatch.setattr(FaissStore, "compact_after_bytes", 0)
        s.upsert(["b", "c"], X[1:], payloads=[b"b" * 100, b"c" * 100])
        s.upsert(["b", "c"], X[1:], payloads=[b"2" * 100, b"3" * 100])
    assert _faiss_files(tmp_path) == sorted(["col.faiss.npz", s.payload_file.name])
    assert s.payload_file.stat().st_size == 300
    with FaissStore(tmp_path, "col", create=False) as s:
        assert s.payloads(["a", "b", "c"]) == [bytes([4]) * 100, b"2" * 100, b"3" * 100]


def test_faiss_store_survives_a_crash_between_appending_payloads_and_saving(tmp_path):
    """Payloads are appended before the index file that refers to them is replaced: a process
    killed in between leaves the previous index, whose payloads are intact."""
    import subprocess
    import sys

    X = np.eye(3, dtype=np.float32)
    with FaissStore(tmp_path, "col") as s:
        s.upsert(["a", "b"], X[:2], payloads=[b"A" * 10, b"B" * 10])
    code = (
        "import numpy as np, os\n"
        "from privembed.integrations.stores import FaissStore\n"
        f"s = FaissStore({str(tmp_path)!r}, 'col', create=False)\n"
        "s.upsert(['a', 'c'], np.eye(3, dtype=np.float32)[[0, 2]], payloads=[b'X' * 10, b'C' * 10])\n"
        "s._pfh.flush()\n"  # the appended bytes reach the file ...
        "os._exit(0)\n"  # ... and the process dies before any save
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with FaissStore(tmp_path, "col", create=False) as s:
        assert s.count() == 2
        assert s.payloads(["a", "b", "c"]) == [b"A" * 10, b"B" * 10, None]
        s.upsert(["c"], X[2:], payloads=[b"C" * 10])  # appends after the orphaned bytes
    with FaissStore(tmp_path, "col", create=False) as s:
        assert s.payloads(["a", "b", "c"]) == [b"A" * 10, b"B" * 10, b"C" * 10]


def _write_layout1(path, collection, ids, X, metas):
    """A store as privembed wrote it before layout 2: payloads base64 in the metadata."""
    import json

    import faiss

    index = faiss.index_factory(X.shape[1], "IDMap2,Flat", faiss.METRIC_INNER_PRODUCT)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    index.add_with_ids(np.ascontiguousarray(Xn, dtype=np.float32), np.arange(len(ids)))
    info = {"format": 1, "store": "faiss", "metric": "cosine", "dim": X.shape[1],
            "factory": "Flat"}  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    with open(path / f"{collection}.faiss.npz", "wb") as fh:
        np.savez(
            fh,
            index=faiss.serialize_index(index),
            ids=np.asarray(ids, dtype=str),
            metadata=np.asarray([json.dumps(m) for m in metas], dtype=str),
            info=np.array(json.dumps(info, sort_keys=True)),
        )


def test_faiss_stores_of_the_earlier_layout_open_and_are_converted(tmp_path, monkeypatch):
    import base64

    from privembed.integrations import store_faiss, stores

    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 8)).astype(np.float32)
    blobs = [rng.bytes(40 + (i % 7)) for i in range(50)]
    metas = [
        {"n": i, stores.PAYLOAD_KEY: base64.b64encode(b).decode()} if i % 5 else {"n": i}
        for i, b in enumerate(blobs)
    ]
    ids = [f"r{i}" for i in range(50)]
    _write_layout1(tmp_path, "old", ids, X, metas)
    # the FAISS store reads layout-1 rows through store_faiss's name for them
    monkeypatch.setattr(
        store_faiss, "_npy_rows", _chunked(stores._npy_rows, 64)
    )  # 1-2 rows a chunk
    want = [b if i % 5 else None for i, b in enumerate(blobs)]
    with FaissStore(tmp_path, "old", create=False) as s:
        assert s.layout == 1 and s.count() == 50
        hit = s.search(X[6], k=1)[0][0]
        assert (hit.id, hit.metadata, hit.payload) == ("r6", {"n": 6}, blobs[6])
        assert s.payloads(ids) == want
    assert _faiss_files(tmp_path) == ["old.faiss.npz"]  # reading converts nothing
    with FaissStore(tmp_path, "old", create=False) as s:
        s.upsert(["r1"], X[1:2], [{"n": 1}], payloads=[b"new"])  # the next save converts
    with FaissStore(tmp_path, "old", create=False) as s:
        assert s.layout == 2 and s.payload_file is not None
        assert s.payloads(ids) == [want[0], b"new", *want[2:]]
        assert s.search(X[3], k=1)[0][0].metadata == {"n": 3}


def _chunked(fn, chunk_bytes):
    return lambda zf, name: fn(zf, name, chunk_bytes)


def test_faiss_store_with_a_missing_or_cut_payload_file_is_refused(tmp_path):
    with FaissStore(tmp_path, "col") as s:
        s.upsert(["a"], np.ones((1, 2)), payloads=[b"x"])
        pfile = s.payload_file
    with FaissStore(tmp_path, "col", create=False) as s:
        pfile.write_bytes(b"")  # cut short while the store is open
        with pytest.raises(DataError, match="ends before the payload of record 'a'"):
            s.payloads(["a"])
    with pytest.raises(DataError, match=r"cannot read FAISS store .*payload file .* is shorter"):
        FaissStore(tmp_path, "col", create=False)
    pfile.unlink()
    with pytest.raises(DataError, match=r"cannot read FAISS store .*payload file .* is missing"):
        FaissStore(tmp_path, "col", create=False)


def test_faiss_searches_a_lone_query_on_one_thread(tmp_path):
    """FAISS parallelises a flat search over queries: one query gains nothing from a second
    thread (docs/benchmarks.md); a batch keeps them. The count is restored after each."""
    import faiss

    seen = []

    class Spy:
        def __init__(self, index):
            self.index = index

        def search(self, Q, k):
            seen.append((Q.shape[0], faiss.omp_get_max_threads()))
            return self.index.search(Q, k)

        def __getattr__(self, name):
            return getattr(self.index, name)

    before = faiss.omp_get_max_threads()
    with FaissStore(tmp_path, "col") as s:
        s.upsert([str(i) for i in range(40)], np.random.default_rng(0).standard_normal((40, 4)))
        s._index = Spy(s._index)
        s.search(np.ones(4), k=3)
        s.search(np.ones((30, 4)), k=3)
        s._index = s._index.index
    assert seen == [(1, 1), (30, before)]
    assert faiss.omp_get_max_threads() == before


@pytest.mark.parametrize("buckets", [None, 3])
def test_faiss_ids_are_packed_and_found_by_hash_even_when_hashes_collide(
    tmp_path, monkeypatch, buckets
):
    """The FAISS store keeps its ids as UTF-8 bytes and looks them up through sorted 64-bit
    hashes (no Python list or dict of ids): with every id's hash forced into one of 3 values
    (``buckets=3``), each id is still its own record -- replaced, never doubled -- the
    candidates keep their order, and the ids stay packed while no metadata changes."""
    from privembed.integrations import store_arrays

    if buckets is not None:
        real = store_arrays._hashes
        monkeypatch.setattr(store_arrays, "_hashes", lambda items: real(items) % buckets)
    rng = np.random.default_rng(5)
    ids = [f"doc-{i}" for i in range(300)] + ["é-ü", "x" * 300, "7", "0"]
    X = rng.standard_normal((len(ids), 6)).astype(np.float32)
    blobs = [f"p{i}".encode() for i in range(len(ids))]
    with FaissStore(tmp_path, "col") as s:
        for a in range(0, len(ids), 97):  # several upserts, each after the last
            s.upsert(ids[a : a + 97], X[a : a + 97], payloads=blobs[a : a + 97])
        assert s._ids._items is None and s._meta._items is None  # packed, not decoded
        # replace 50 records (same metadata: still packed), add 2 new ones in the same call
        again = [*ids[::7][:50], "new-1", "new-2"]
        Y = rng.standard_normal((len(again), 6)).astype(np.float32)
        s.upsert(again, Y, payloads=[b"r-" + a.encode() for a in again])
        assert s._ids._items is None and s._meta._items is None
        assert s.count() == len(ids) + 2
        assert s.store_ids() == sorted([*ids, "new-1", "new-2"])
        want = {**dict(zip(ids, blobs, strict=True)), **{a: b"r-" + a.encode() for a in again}}
        asked = ["new-2", "doc-7", "missing", "é-ü", "doc-8", "x" * 300, "7"]
        assert s.payloads(asked) == [want.get(a) for a in asked]
        hit = s.search(Y[1], k=1)[0][0]
        assert (hit.id, hit.payload) == (again[1], b"r-" + again[1].encode())
        c = s.candidates(X[:3], k=4)
        assert s.candidate_ids(c) == [([*ids, "new-1", "new-2"])[lab] for lab in c.keys]
        # a metadata change decodes the metadata list once; the ids stay packed
        s.upsert(["doc-1"], X[1:2], [{"n": 1}])
        assert s._ids._items is None and s._meta._items is not None
    with FaissStore(tmp_path, "col", create=False) as s:
        assert s.count() == len(ids) + 2
        assert s.payloads(["doc-8", "new-1", "doc-1"]) == [want["doc-8"], b"r-new-1", None]
        assert s.search(X[1], k=1)[0][0].metadata == {"n": 1}
        s.upsert(["doc-9", "new-3"], X[:2])  # a reopened store: its ids hashed on first use
        assert s.count() == len(ids) + 3 and s.payloads(["doc-9"]) == [None]


def test_packed_strings_append_take_and_replace():
    from privembed.integrations.store_arrays import _Strings

    s = _Strings()
    s.extend(["a", "", "ü" * 3])
    s.append("z")
    s.extend([])
    assert (len(s), list(s), s.take([3, 0, 2]), s[1]) == (
        4,
        ["a", "", "ü" * 3, "z"],
        ["z", "a", "ü" * 3],
        "",
    )
    raw, off = s.arrays()
    t = _Strings(raw.tobytes(), off)
    assert list(t) == list(s) and t._items is None
    t[0] = "b"  # a replacement decodes once, then appends go to the list
    t.extend(["c"])
    assert list(t) == ["b", "", "ü" * 3, "z", "c"]
    raw, off = t.arrays()
    assert list(_Strings(raw.tobytes(), off)) == list(t)
    with pytest.raises(IndexError):
        s.take([4])
    with pytest.raises(ValueError, match="offsets do not match"):
        _Strings(b"ab", np.array([0, 3]))
