"""The Ray Data engine equals the single-machine path bit for bit (same input, same key).

One Ray session for the module (start-up is slow); three small jobs: two shards with a small
batch size and a ledger, the same records re-partitioned into three shards with another batch
size, and a job that hits a bad row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from privembed import get_mechanism
from privembed.cli import app
from privembed.data.io import read_embeddings, write_embeddings
from privembed.integrations.shards import protect_shards
from privembed.keys.ledger import Ledger

from .conftest import KEY

pytestmark = pytest.mark.slow

N, D = 500, 16


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _records():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, D)).astype(np.float32)
    ids = [f"doc-{i:04d}" for i in range(N)]
    return X, ids


def _write_shards(folder: Path, cuts: list[int], order: np.ndarray) -> list[Path]:
    X, ids = _records()
    folder.mkdir()
    paths = []
    for j, (a, b) in enumerate(zip([0, *cuts], [*cuts, N], strict=True)):
        rows = order[a:b]
        p = folder / f"part-{j}.parquet"
        write_embeddings(
            p,
            X[rows],
            ids=[ids[r] for r in rows],
            metadata={"embedding_model": "toy"},
            extra=pa.table({"lang": [f"l{r % 3}" for r in rows]}),
        )
        paths.append(p)
    return paths


def _by_id(folder: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(folder.glob("*.parquet")):
        t = read_embeddings(f)
        assert t.X.dtype == np.float32
        assert t.metadata["protected"] is True and t.metadata["key_id"]
        for i, row in zip(t.ids.tolist(), t.X, strict=True):
            assert i not in out
            out[i] = row
    return out


def test_ray_equals_local_and_protect_bit_for_bit(ray_session, tmp_path, key_file):
    mech = get_mechanism("gaussian", epsilon=8.0, delta=1e-5)
    two = _write_shards(tmp_path / "two", [300], np.arange(N))
    # single machine, reference 1: `privembed protect` on each shard with the same key
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    for p in two:
        r = CliRunner().invoke(
            app,
            [
                "protect",
                str(p),
                "-o",
                str(ref_dir / p.name),
                "-m",
                "gaussian",
                "--epsilon",
                "8",
                "--delta",
                "1e-5",
                "--key-file",
                str(key_file),
            ],
        )
        assert r.exit_code == 0, r.output
    ref = _by_id(ref_dir)
    assert len(ref) == N
    # reference 2: the local engine
    local = protect_shards(tmp_path / "two", tmp_path / "local", mech, key=KEY)
    assert local["rows"] == N and local["files_out"] == 2
    # Ray: the two shards in batches of 64, with a ledger (one release per output shard)
    ledger = tmp_path / "ledger.db"
    s1 = protect_shards(
        str(tmp_path / "two" / "*.parquet"),
        tmp_path / "ray1",
        mech,
        key=KEY,
        engine="ray",
        batch_rows=64,
        ledger=ledger,
        keep_columns=["lang"],
    )
    # Ray again: the same records shuffled into three shards, batches of 1000
    order = np.random.default_rng(3).permutation(N)
    _write_shards(tmp_path / "three", [120, 310], order)
    s2 = protect_shards(
        tmp_path / "three", tmp_path / "ray2", mech, key=KEY, engine="ray", batch_rows=1000
    )
    assert s1["rows"] == s2["rows"] == N
    for other in (_by_id(tmp_path / "local"), _by_id(tmp_path / "ray1"), _by_id(tmp_path / "ray2")):
        assert other.keys() == ref.keys()
        for i, v in ref.items():
            assert np.array_equal(other[i], v), i
    # other columns are dropped unless named; a named one travels with its rows
    assert s2["dropped_columns"] == ["lang"] and s1["kept_columns"] == ["lang"]
    assert "lang" not in pq.read_schema(next((tmp_path / "ray2").glob("*.parquet"))).names
    t = pq.read_table(next((tmp_path / "ray1").glob("*.parquet"))).to_pydict()
    assert all(lang == f"l{int(i[4:]) % 3}" for i, lang in zip(t["id"], t["lang"], strict=True))
    # the ledger: written by the driver, the job is one release, every record once, keyed
    with Ledger(ledger) as led:
        rows = led.export()
        assert len({r["batch"] for r in rows}) == s1["ledger_releases"] == 1
        assert len(rows) == N and all(r["tag"] for r in rows)
        assert led.unpublished() == []
        assert {s.releases for s in led.spent()} == {1}


def test_ray_reports_bad_rows_as_one_line_errors(ray_session, tmp_path, key_file):
    X, ids = _records()
    X[123, :] = np.nan
    (tmp_path / "in").mkdir()
    write_embeddings(tmp_path / "in" / "a.parquet", X, ids=ids)
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        [
            "protect-shards",
            str(tmp_path / "in"),
            "-o",
            str(out),
            "-m",
            "laplace",
            "--epsilon",
            "5",
            "--key-file",
            str(key_file),
            "--engine",
            "ray",
        ],
    )
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert "NaN or inf" in err and "the batch starting at id 'doc-" in err, err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "release.key"]  # no staging
