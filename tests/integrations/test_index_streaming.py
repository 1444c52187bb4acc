"""``privembed index`` in bounded memory (issue 38.2): the input is read and written a batch at a
time, the profile comes from a bounded uniform sample, and none of it changes what is stored --
the same protected vectors, payloads and profile whatever the batch size."""

from __future__ import annotations

import base64
import io
import itertools
import json
import os

import numpy as np
import pytest

from privembed import DataError, get_mechanism
from privembed.data.io import iter_batches, read_embeddings, write_embeddings
from privembed.integrations import collection as col_mod
from privembed.integrations import collection_index as index_mod  # where index_file reads them
from privembed.integrations import collection_plan as plan_mod  # where the profile reads them
from privembed.integrations.collection import ProtectedCollection, _Reservoir, index_file

from .conftest import KEY, clustered

N, D = 61, 12
MECH = get_mechanism("laplace", epsilon=50.0)


def _files(tmp_path):
    X = clustered(N, D, seed=4)
    ids = [f"r{i}" for i in range(N)]
    pq, jl = tmp_path / "x.parquet", tmp_path / "x.jsonl"
    write_embeddings(pq, X, ids=ids)
    write_embeddings(jl, X, ids=ids)
    return pq, jl


def _contents(path):
    """Everything a collection holds, opened with the key: ids, protected vectors, the exact
    vectors in the payloads, and the profile's arrays."""
    with ProtectedCollection.open("faiss", path, "col", key=KEY, create=False) as col:
        hits = col.store.search(
            np.ones(col.store.dim), k=N + 5, with_vectors=True, with_payloads=True
        )[0]
        hits = sorted(hits, key=lambda h: h.id)
        ids = [h.id for h in hits]
        assert col.codec is not None
        exact = col.codec.vectors([h.payload for h in hits], ids=ids, collection="col")
        opened = col.codec.open(
            col._profile_path().read_bytes(), record_id="privembed:rerank-profile",
            collection="col",
        )  # fmt: skip
        with np.load(io.BytesIO(base64.b64decode(opened.text or ""))) as z:
            profile = {k: np.array(z[k]) for k in z.files}
    return ids, np.array([h.vector for h in hits]), exact, profile


def _index(src, dst, batch_rows, cap):
    return index_file(src, "faiss", dst, "col", mechanism=MECH, key=KEY, payloads=True,
                      batch_rows=batch_rows, profile_max_docs=cap)  # fmt: skip


@pytest.mark.parametrize("cap", [25, 1000])  # a sample of the documents, and all of them
def test_streamed_index_holds_what_one_batch_holds(tmp_path, cap):
    pq, jl = _files(tmp_path)
    for src in (pq, jl):
        whole = _index(src, tmp_path / f"{src.suffix[1:]}-whole", 10_000, cap)
        ref = _contents(tmp_path / f"{src.suffix[1:]}-whole")
        assert whole["rows"] == N and len(ref[0]) == N
        for batch_rows in (1, 7):
            dst = tmp_path / f"{src.suffix[1:]}-{batch_rows}"
            assert _index(src, dst, batch_rows, cap)["rows"] == N
            ids, protected, exact, profile = _contents(dst)
            assert ids == ref[0]
            np.testing.assert_array_equal(protected, ref[1])
            np.testing.assert_array_equal(exact, ref[2])
            assert profile.keys() == ref[3].keys()
            for k in profile:
                np.testing.assert_array_equal(profile[k], ref[3][k], err_msg=k)
    # the exact vectors are the file's (float32), the protected ones are not
    np.testing.assert_array_equal(ref[2], clustered(N, D, seed=4)[[int(i[1:]) for i in ref[0]]])
    assert not np.allclose(ref[1], ref[2])


def _reservoir_row_at_a_time(batches, cap, rng):
    """Algorithm R one row at a time (the sampler before it was vectorised): the reference."""
    gen = np.random.default_rng(rng)
    rows, seen = [], 0
    for X in batches:
        for row in np.asarray(X, dtype=np.float16):
            if seen < cap:
                rows.append(row)
            else:
                j = int(gen.integers(0, seen + 1))
                if j < cap:
                    rows[j] = row
            seen += 1
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("cap", [1, 5, 40, 500])
def test_reservoir_is_the_row_at_a_time_sample(cap):
    X = np.random.default_rng(2).standard_normal((300, 6)).astype(np.float32)
    cuts = [0, 3, 4, 90, 91, 250, 300]  # batches of 3, 1, 86, 1, 159 and 50 rows
    batches = [X[a:b] for a, b in itertools.pairwise(cuts)]
    res = _Reservoir(cap, rng=0)
    for b in batches:
        res.add(b)
    ref = _reservoir_row_at_a_time(batches, cap, 0)
    np.testing.assert_array_equal(res.rows(), ref)
    assert res.seen == 300 and res.rows().shape == (min(cap, 300), 6)
    # row numbers only, the rows read again from a second pass (in other batches)
    nums = _Reservoir(cap, rng=0, rows=False)
    for b in batches:
        nums.add(b)
    again = ((X[s : s + 64], s) for s in range(0, 300, 64))
    np.testing.assert_array_equal(nums.gather(again), ref)
    with pytest.raises(ValueError, match="gather"):
        nums.rows()
    with pytest.raises(DataError, match="ended before"):
        nums.gather(iter([(X[:10], 0)]))


def test_reservoir_is_uniform():
    # each of 40 rows lands in a 10-row sample with probability 1/4: over 2,000 seeded
    # samples, every row's count is within 4.4 binomial standard errors of 500
    counts = np.zeros(40)
    for seed in range(2000):
        res = _Reservoir(10, rng=seed)
        for s in range(0, 40, 7):
            res.add(np.arange(s, min(s + 7, 40), dtype=np.float32)[:, None] + 1)
        counts[res.rows()[:, 0].astype(int) - 1] += 1
    assert np.abs(counts - 500).max() < 4.4 * np.sqrt(2000 * 0.25 * 0.75)


def test_jsonl_is_read_a_batch_at_a_time_as_the_whole_file_reads_it(tmp_path, monkeypatch):
    _, jl = _files(tmp_path)
    whole = read_embeddings(jl, validate=False)
    n, dim, meta, batches = iter_batches(jl, batch_rows=7)
    got = list(batches)
    assert (n, dim, meta) == (N, D, {}) and [b.num_rows for b in got] == [7] * 8 + [5]
    np.testing.assert_array_equal(np.concatenate([b.X for b in got]), whole.X)
    assert [i for b in got for i in b.ids] == list(whole.ids)
    assert [b.start for b in got] == list(range(0, N, 7))
    # index never reads a JSONL file whole, and each upsert holds one batch at most
    import sys

    for name, mod in list(sys.modules.items()):  # wherever the readers look it up
        if name.startswith("privembed.data") and hasattr(mod, "read_embeddings"):
            monkeypatch.setattr(mod, "read_embeddings", lambda *a, **k: pytest.fail("whole"))
    sizes = []
    real_add = ProtectedCollection.add

    def add(self, ids, X, *a, **k):
        sizes.append(len(ids))
        return real_add(self, ids, X, *a, **k)

    monkeypatch.setattr(ProtectedCollection, "add", add)
    assert _index(jl, tmp_path / "db", 9, 200)["rows"] == N
    assert sizes == [9] * 6 + [7]


def test_a_bad_jsonl_line_anywhere_stops_the_index_before_anything_is_written(tmp_path):
    _, jl = _files(tmp_path)
    lines = jl.read_text().splitlines()
    for bad, message in [
        ('{"id": "z", "embedding": [1.0]}', "different lengths"),
        ('{"embedding": ' + json.dumps([0.5] * D) + "}", "missing 'id'"),
        ('{"id": "z", "vector": [1.0]}', "missing 'embedding'"),
        ('{"id": "z", "embedding": 3}', "must be a list of numbers"),
        ("{not json", "invalid JSON"),
    ]:
        src = tmp_path / "bad.jsonl"
        src.write_text("\n".join([*lines, bad]) + "\n")  # the last line, after 8 full batches
        with pytest.raises(DataError, match=message):
            _index(src, tmp_path / "db", 7, 200)
        assert not (tmp_path / "db").exists()
    src.write_text("")
    with pytest.raises(DataError, match="got shape"):
        iter_batches(src)


def test_the_profile_is_made_once_the_store_is_closed(tmp_path, monkeypatch):
    """The store's vectors (N x d in a FAISS index) are freed before the profile copies its
    sample: the two peaks do not add up."""
    pq, _ = _files(tmp_path)
    events = []
    real_close, real_seal = ProtectedCollection.close, col_mod._ProfileTarget.seal

    def close(self):
        events.append("store closed")
        real_close(self)

    def seal(self, *a, **k):
        events.append("profile sealed")
        real_seal(self, *a, **k)

    monkeypatch.setattr(ProtectedCollection, "close", close)
    monkeypatch.setattr(col_mod._ProfileTarget, "seal", seal)
    _index(pq, tmp_path / "db", 16, 200)
    assert events == ["store closed", "profile sealed"]
    with ProtectedCollection.open("faiss", tmp_path / "db", "col", key=KEY) as col:
        assert col.profile_source == "documents" and col.planner().profile.n_docs == N


@pytest.mark.parametrize("mech_name", ["laplace", "subspace"])
def test_profile_in_small_blocks_is_the_same_profile(tmp_path, monkeypatch, mech_name):
    """The profile's sample queries are scored a few at a time against a large sample of
    documents (memory: a block of scores, not queries x documents); each query's scores are its
    own, so the block size changes nothing."""
    pq, _ = _files(tmp_path)
    mech = MECH
    if mech_name == "subspace":
        from privembed.mechanisms.subspace import SubspaceBasis, SubspaceMechanism

        public = SubspaceBasis.from_embeddings(clustered(N, D, seed=9))  # other data
        mech = SubspaceMechanism(basis=public, epsilon=50.0, k=4)
    blocks = []
    real = plan_mod._profile_block

    def spy(n_docs, n_queries):
        blocks.append(real(n_docs, n_queries))
        return blocks[-1]

    monkeypatch.setattr(plan_mod, "_profile_block", spy)
    got = {}
    for budget in (plan_mod.PROFILE_BLOCK_BYTES, 8 * N * 3):  # 256 queries a block, then 2
        monkeypatch.setattr(plan_mod, "PROFILE_BLOCK_BYTES", budget)
        dst = tmp_path / f"db-{budget}"
        index_file(pq, "faiss", dst, "col", mechanism=mech, key=KEY, payloads=True,
                   profile_queries=40)  # fmt: skip
        got[budget] = _contents(dst)[3]
    assert blocks == [256, 2]  # 40 queries: not 3 a block (a lone query in the last block)
    a, b = got.values()
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_profile_blocks_fit_the_budget_and_never_end_with_a_lone_query():
    for n_docs in (10, 1_000, 50_000, 200_000, 5_000_000):
        for n_q in (1, 2, 7, 40, 199, 200, 201, 1000):
            b = plan_mod._profile_block(n_docs, n_q)
            assert 2 <= b <= 256 and (n_q <= b or n_q % b != 1), (n_docs, n_q, b)
            fits = max(2, min(256, plan_mod.PROFILE_BLOCK_BYTES // (8 * n_docs)))
            if n_q <= fits or n_q % fits != 1:
                assert b == fits  # the budget's block, where it leaves no lone query


def test_an_input_changed_before_the_profile_is_read_again_is_refused(tmp_path, monkeypatch):
    """The profile's sample is read from the file again once the store is closed (it is kept
    as row numbers meanwhile): a file changed in between is refused, and a new store removed."""
    pq, _ = _files(tmp_path)
    real_close = ProtectedCollection.close

    def close(self):
        real_close(self)
        pq.write_bytes(pq.read_bytes() + b"")  # the same bytes, a new modification time
        os.utime(pq, ns=(1, 1))

    monkeypatch.setattr(ProtectedCollection, "close", close)
    with pytest.raises(DataError, match="changed while it was indexed"):
        _index(pq, tmp_path / "db", 16, 200)
    assert not (tmp_path / "db").exists()


def test_repeated_ids_are_refused_after_the_check_moves_to_disk(tmp_path, monkeypatch):
    """The ids already indexed are checked on disk past SEEN_IN_MEMORY: a repeat far apart is
    still refused, before anything is kept."""
    from privembed.keys.ledger import DuplicateIds

    monkeypatch.setattr(index_mod, "SEEN_IN_MEMORY", 10)
    X = clustered(N, D, seed=4)
    ids = [f"r{i}" for i in range(N)]
    ids[-1] = "r3"  # a repeat 57 rows after the first, 8 batches of 7 later
    src = tmp_path / "dup.parquet"
    write_embeddings(src, X, ids=ids)
    with pytest.raises(DuplicateIds, match="'r3'"):
        _index(src, tmp_path / "db", 7, 200)
    assert not (tmp_path / "db").exists()
    src2 = tmp_path / "ok.parquet"
    write_embeddings(src2, X, ids=[f"r{i}" for i in range(N)])
    assert _index(src2, tmp_path / "db2", 7, 200)["rows"] == N
