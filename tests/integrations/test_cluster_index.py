"""Several writers, one pgvector collection, one ledger (issue 38.5), against a real PostgreSQL.

A few hundred records in shards; two writers (local processes) write into one hash-partitioned
collection. The result must equal a single-process index of the same data with the same key
(protected vectors bit for bit, the re-ranked top 10 of every query), every record must be
charged exactly once, and a writer killed in the middle of a batch -- after half of its rows
were committed -- must leave, after the same call is run again, neither a missing nor a
duplicated row nor a second charge.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from privembed import get_mechanism
from privembed.data.io import write_embeddings
from privembed.integrations import cluster_index
from privembed.integrations.cluster_index import index_cluster, prepare_collection
from privembed.integrations.collection import ProtectedCollection
from privembed.integrations.stores import PgVectorStore
from privembed.keys.ledger import Ledger

from .conftest import KEY, clustered

N, D, BATCH = 300, 32, 40
EPS = 200.0


def _mech():
    return get_mechanism("laplace", epsilon=EPS)


def _data() -> tuple[np.ndarray, list[str]]:
    X = clustered(N, D, seed=3).astype(np.float32)
    return X, [f"doc-{i:04d}" for i in range(N)]


def _shards(folder: Path) -> Path:
    X, ids = _data()
    folder.mkdir()
    for j, (a, b) in enumerate([(0, 130), (130, N)]):
        write_embeddings(folder / f"part-{j}.parquet", X[a:b], ids=ids[a:b],
                         metadata={"embedding_model": "toy"})  # fmt: skip
    return folder


def _rows(url: str, collection: str) -> tuple[int, int, dict[str, np.ndarray]]:
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(url) as conn:
        register_vector(conn)
        table = f"pev_{collection}"
        n, distinct = conn.execute(f'SELECT COUNT(*), COUNT(DISTINCT id) FROM "{table}"').fetchone()
        vecs = {
            str(r[0]): np.asarray(r[1].to_numpy(), dtype=np.float32)
            for r in conn.execute(f'SELECT id, embedding FROM "{table}"').fetchall()
        }
    return int(n), int(distinct), vecs


def _partitions(url: str, collection: str) -> list[tuple[str, int]]:
    import psycopg

    with psycopg.connect(url) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s ORDER BY 1",
                (f"pev_{collection}",),
            ).fetchall()
        ]
        return [(n, conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]) for n in names]


def _single(url: str, tmp_path: Path) -> ProtectedCollection:
    """The reference: one process, one add of every record, same key, same model, its own
    ledger (``single.db``)."""
    X, ids = _data()
    col = ProtectedCollection.open(
        "pgvector", tmp_path / "single", "single", mechanism=_mech(), key=KEY, payloads=True,
        embedding_model="toy", store_options={"dsn": url},
    )  # fmt: skip
    with Ledger(tmp_path / "single.db") as led:
        col.add(ids, X, ledger=led)
    return col


def _spent(ledger: Path) -> tuple[set[float], int, int]:
    with Ledger(ledger) as led:
        spent = led.spent()
    return {round(s.epsilon, 9) for s in spent}, len(spent), sum(s.releases for s in spent)


def test_two_writers_equal_one_process_and_charge_once(pg_url, tmp_path):
    shards = _shards(tmp_path / "shards")
    ledger = tmp_path / "ledger.db"
    out = index_cluster(
        shards, pg_url, "cluster", _mech(), key=KEY, path=tmp_path / "cl", writers=2,
        partitions=4, ledger=ledger, batch_rows=BATCH,
    )  # fmt: skip
    assert out["count"] == N and out["rows"] == N
    assert len(out["writers"]) == 2
    # shards of 130 and 170 rows in batches of 40: 9 batches; batch 0 is also written by the
    # driver, the writers share the other 8
    assert sum(w["rows"] for w in out["writers"]) == N - BATCH
    assert sorted(w["batches"] for w in out["writers"]) == [4, 4]
    assert out["ledger"]["fresh"] == N and out["ledger"]["free"] == 0
    assert out["ledger"]["batches"] == 9
    # four hash partitions, every one used (300 ids), the rows in none twice
    parts = _partitions(pg_url, "cluster")
    assert [p for p, _ in parts] == [f"pev_cluster_p{i}" for i in range(4)]
    assert sum(c for _, c in parts) == N and min(c for _, c in parts) > 0
    # every record charged once, what a single process's index charges it
    single = _single(pg_url, tmp_path)
    one = _spent(tmp_path / "single.db")
    assert len(one[0]) == 1 and one[1:] == (N, N)
    assert _spent(ledger) == one

    n, distinct, got = _rows(pg_url, "cluster")
    _n1, _d1, ref = _rows(pg_url, "single")
    assert n == distinct == N
    assert set(got) == set(ref)
    assert all(np.array_equal(got[i], ref[i]) for i in ref)  # bit for bit

    # the existing query path (re-rank with the key) returns the same top 10 on both
    rng = np.random.default_rng(11)
    X, _ids = _data()
    Q = X[rng.choice(N, 20, replace=False)] + 0.05 * rng.standard_normal((20, D)).astype(np.float32)
    clustered_col = ProtectedCollection.open(
        "pgvector", tmp_path / "cl", "cluster", key=KEY, store_options={"dsn": pg_url}
    )
    try:
        assert clustered_col.has_payloads
        a = clustered_col.query(Q, k=10, rerank=60)
        b = single.query(Q, k=10, rerank=60)
    finally:
        clustered_col.close()
        single.close()
    assert [[h.id for h in hs] for hs in a] == [[h.id for h in hs] for hs in b]
    # exact cosines from the opened payloads: the clean top 10 at this depth
    C = (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ (
        X / np.linalg.norm(X, axis=1, keepdims=True)
    ).T
    for hs, c in zip(a, C, strict=True):
        assert np.allclose([h.score for h in hs], np.sort(c)[::-1][:10], atol=1e-5)


#: the record whose batch a writer dies in: batch 5 (rows 170..209), writer 1's third (1, 3, 5, 7)
VICTIM = "doc-0200"


def _dying_writer(target, plan, w, n, conn):
    """A writer process (spawned: it imports this module) whose upsert of the batch holding
    :data:`VICTIM` commits half of the batch's rows and then kills the process (SIGKILL)."""
    real = PgVectorStore._upsert

    def dying(self, batch):
        if VICTIM in batch.ids:
            h = len(batch.ids) // 2
            real(self, type(batch)(*(None if part is None else part[:h] for part in batch)))
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, batch)

    PgVectorStore._upsert = dying
    cluster_index._local_writer(target, plan, w, n, conn)


def test_a_writer_killed_mid_batch_then_rerun(pg_url, tmp_path, monkeypatch):
    """Writer 1's third batch commits half its rows, then the process is killed (SIGKILL):
    the call fails in one line with the release committed; the same call again completes the
    collection without a duplicate and charges nothing new."""
    shards = _shards(tmp_path / "shards")
    ledger = tmp_path / "ledger.db"
    real = cluster_index._local_writer
    monkeypatch.setattr(cluster_index, "_local_writer", _dying_writer)
    args = dict(key=KEY, path=tmp_path / "cl", writers=2, partitions=3, ledger=ledger,
                batch_rows=BATCH)  # fmt: skip
    with pytest.raises(RuntimeError, match=r"writer 1 died \(exit code -9\).*run the same call"):
        index_cluster(shards, pg_url, "killed", _mech(), **args)
    n, distinct, _got = _rows(pg_url, "killed")
    assert n == distinct and 0 < n < N  # half a batch is in, what came after it is not
    monkeypatch.setattr(cluster_index, "_local_writer", real)
    single = _single(pg_url, tmp_path)
    single.close()
    one = _spent(tmp_path / "single.db")
    assert _spent(ledger) == one  # committed before any write: every record, once

    out = index_cluster(shards, pg_url, "killed", _mech(), **args)
    assert out["count"] == N
    assert out["ledger"]["fresh"] == 0 and out["ledger"]["free"] == N
    n, distinct, got = _rows(pg_url, "killed")
    assert n == distinct == N
    assert _spent(ledger) == (one[0], N, 2 * N)  # a second release of each record, free
    _n, _d, ref = _rows(pg_url, "single")
    assert all(np.array_equal(got[i], ref[i]) for i in ref)


def test_refusals(pg_url, tmp_path):
    shards = _shards(tmp_path / "shards")
    with pytest.raises(ValueError, match="needs a key"):
        index_cluster(shards, pg_url, "coll", _mech(), key=None)
    with pytest.raises(ValueError, match="engine='ray' only"):
        index_cluster(shards, pg_url, "coll", _mech(), key=KEY, num_cpus=2)
    with pytest.raises(ValueError, match="partitions must be"):
        prepare_collection(pg_url, "coll", tmp_path, dim=D, metric="cosine", partitions=0)
    # a collection of another mechanism is refused before any ledger record or write
    index_cluster(shards, pg_url, "coll", _mech(), key=KEY, path=tmp_path / "coll", batch_rows=100)
    ledger = tmp_path / "ledger.db"
    with pytest.raises(ValueError, match="mixing them makes scores incomparable"):
        index_cluster(shards, pg_url, "coll", get_mechanism("laplace", epsilon=50.0), key=KEY,
                      path=tmp_path / "coll", ledger=ledger)  # fmt: skip
    assert not ledger.exists() or _spent(ledger)[1] == 0


@pytest.mark.slow
def test_ray_writers_equal_the_local_ones(pg_url, tmp_path):
    """Two Ray Data actors (a local Ray instance) write the same bits as the local writers, and
    the second run of the same call charges nothing."""
    pytest.importorskip("ray")
    import ray

    shards = _shards(tmp_path / "shards")
    ledger = tmp_path / "ledger.db"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = index_cluster(
            shards, pg_url, "viaray", _mech(), key=KEY, path=tmp_path / "r", writers=2,
            engine="ray", partitions=2, ledger=ledger, batch_rows=BATCH,
        )  # fmt: skip
        again = index_cluster(
            shards, pg_url, "viaray", _mech(), key=KEY, path=tmp_path / "r", writers=2,
            engine="ray", ledger=ledger, batch_rows=BATCH,
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert out["count"] == again["count"] == N
    assert sum(w["rows"] for w in out["writers"]) == N  # Ray's blocks: every row by a writer
    assert 1 <= len(out["writers"]) <= 2
    assert out["ledger"]["fresh"] == N and again["ledger"]["fresh"] == 0
    n, distinct, got = _rows(pg_url, "viaray")
    assert n == distinct == N
    index_cluster(shards, pg_url, "vialocal", _mech(), key=KEY, path=tmp_path / "l",
                  writers=2, batch_rows=BATCH)  # fmt: skip
    _n, _d, ref = _rows(pg_url, "vialocal")
    assert set(got) == set(ref)
    assert all(np.array_equal(got[i], ref[i]) for i in ref)


def test_the_command_line_front_end(pg_url, tmp_path, monkeypatch):
    """``privembed index-shards``: the DSN from the environment, two writers into a partitioned
    collection, every record charged once (a second run: all free), the summary as JSON; a
    command without a key, or with Ray's options on the local engine, writes nothing."""
    import json

    from typer.testing import CliRunner

    from privembed.cli import app

    runner = CliRunner()
    shards = _shards(tmp_path / "shards")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVEMBED_PG_DSN", pg_url)
    assert runner.invoke(app, ["keygen", "-o", "release.key"]).exit_code == 0
    base = ["index-shards", str(shards), "--collection", "cli_coll", "--path", "cli-local",
            "-m", "laplace", "--epsilon", str(EPS)]  # fmt: skip
    for extra, message in [
        ([], "needs --key-file"),
        (["--key-file", "release.key", "--dsn", ""], "needs the database"),
        (["--key-file", "release.key", "--num-cpus", "2"], "engine='ray' only"),
    ]:
        r = runner.invoke(app, [*base, *extra, "--ledger", "refused.db"])
        assert r.exit_code == 2 and message in r.output, r.output  # a usage error
        assert not (tmp_path / "refused.db").exists() and not (tmp_path / "cli-local").exists()
    run = [*base, "--key-file", "release.key", "--writers", "2", "--partitions", "2",
           "--batch-rows", str(BATCH), "--ledger", "ledger.db"]  # fmt: skip
    r = runner.invoke(app, [*run, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["rows"] == out["count"] == N and out["ledger"]["fresh"] == N
    assert len(_partitions(pg_url, "cli_coll")) == 2
    r = runner.invoke(app, run)  # the same command again: a free re-release, the same rows
    assert r.exit_code == 0, r.output
    assert f"indexed {N} records into cli_coll ({N} rows there)" in r.output
    assert "ledger: 0 record(s) charged" in r.output
    assert _rows(pg_url, "cli_coll")[:2] == (N, N)
    assert _spent(tmp_path / "ledger.db")[1] == N
