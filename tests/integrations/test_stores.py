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
from privembed.ledger import BudgetExceeded, Ledger
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
    with ProtectedCollection.open("faiss", tmp_path, "col2", mechanism=fresh, rng=0) as col:
        with pytest.raises(BudgetExceeded, match="30 record"):
            col.add(ids, X, ledger=led)  # a fresh (unkeyed) release would pass the budget
        assert col.store.count() == 0  # nothing was sent
    spent = {s.record_id: s for s in led.spent()}
    assert spent["s:r0"].releases == 2 and spent["s:r0"].free_releases == 1
    led.close()
