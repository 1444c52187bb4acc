"""Parquet shards with the local engine: listing, checks, the ledger, atomic output, the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import DataError, get_mechanism
from privembed.cli import app
from privembed.data.io import read_embeddings, read_metadata, write_embeddings
from privembed.integrations.shards import protect_shards, resolve_shards
from privembed.keys.ledger import BudgetExceeded, Ledger
from privembed.release import protect

from .conftest import KEY

runner = CliRunner()


def _shards(folder: Path, sizes=(30, 20), d=8, start=0, seed=0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths, offset = [], start
    for j, n in enumerate(sizes):
        p = folder / f"s{j}.parquet"
        X = rng.standard_normal((n, d)).astype(np.float32)
        write_embeddings(p, X, ids=list(range(offset, offset + n)), metadata={"src": j})
        paths.append(p)
        offset += n
    return paths


def _assert_user_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert pattern in " ".join(err.split()), err


def test_resolve_shards(tmp_path):
    paths = _shards(tmp_path / "a")
    (tmp_path / "a" / "notes.txt").write_text("x")
    assert resolve_shards(tmp_path / "a") == paths
    assert resolve_shards(str(tmp_path / "a" / "s*.parquet")) == paths
    assert resolve_shards([paths[1], paths[0], paths[1]]) == [paths[1], paths[0]]
    with pytest.raises(FileNotFoundError, match=r"no \.parquet files match"):
        resolve_shards(str(tmp_path / "a" / "z*.parquet"))
    with pytest.raises(FileNotFoundError, match=r"no \.parquet files in folder"):
        resolve_shards(tmp_path)
    with pytest.raises(ValueError, match="must be Parquet"):
        resolve_shards(tmp_path / "a" / "notes.txt")
    with pytest.raises(FileNotFoundError, match="file not found"):
        resolve_shards(tmp_path / "missing.parquet")


def test_local_engine_keyed_equals_privatize_and_keeps_names(tmp_path):
    paths = _shards(tmp_path / "in")
    mech = get_mechanism("purkayastha", epsilon=20.0)
    s = protect_shards(tmp_path / "in", tmp_path / "out", mech, key=KEY, batch_rows=7)
    assert (s["rows"], s["files_out"], s["dim_in"], s["dim_out"]) == (50, 2, 8, 8)
    for p in paths:
        src, out = read_embeddings(p), read_embeddings(tmp_path / "out" / p.name)
        expect = protect(src.X, mech, ids=list(src.ids), key=KEY)
        np.testing.assert_array_equal(out.X, expect)
        assert out.metadata["src"] == src.metadata["src"] and out.metadata["protected"]
    # seeded runs are reproducible (experiments) and differ from keyed ones
    a = protect_shards(tmp_path / "in", tmp_path / "o1", mech, rng=3)
    b = protect_shards(tmp_path / "in", tmp_path / "o2", mech, rng=3)
    assert a["rows"] == b["rows"] == 50
    x1, x2 = (
        read_embeddings(tmp_path / "o1" / "s0.parquet"),
        read_embeddings(tmp_path / "o2" / "s0.parquet"),
    )
    np.testing.assert_array_equal(x1.X, x2.X)
    assert read_metadata(tmp_path / "o1" / "s0.parquet")["randomness"].startswith("seeded")


def test_projection_shards_record_the_public_matrix(tmp_path):
    _shards(tmp_path / "in", d=16)
    mech = get_mechanism("projection", k=4, epsilon=5.0, delta=1e-5)
    protect_shards(tmp_path / "in", tmp_path / "out", mech, key=KEY)
    meta = read_metadata(tmp_path / "out" / "s0.parquet")
    assert meta["projection"]["d"] == 16 and meta["projection"]["k"] == 4
    assert read_embeddings(tmp_path / "out" / "s1.parquet").X.shape == (20, 4)


def test_reprotected_shards_describe_only_this_release(tmp_path):
    """Re-protecting keyed, projected shards with seeded noise: the output's metadata is this
    release's (as ``protect`` writes it), not a mix with the earlier key id and projection."""
    _shards(tmp_path / "in", d=16)
    proj = get_mechanism("projection", k=8, epsilon=5.0, delta=1e-5)
    protect_shards(tmp_path / "in", tmp_path / "once", proj, key=KEY)
    first = read_metadata(tmp_path / "once" / "s0.parquet")
    assert first["key_id"] and first["projection"]["k"] == 8
    lap = get_mechanism("laplace", epsilon=50.0)
    protect_shards(tmp_path / "once", tmp_path / "twice", lap, rng=1, allow_reprotect=True)
    meta = read_metadata(tmp_path / "twice" / "s0.parquet")
    assert meta["mechanism"]["mechanism"] == "laplace" and meta["randomness"].startswith("seeded")
    assert "key_id" not in meta and "projection" not in meta, meta
    assert meta["previous_protection"]["mechanism"]["mechanism"] == "projection"
    assert meta["src"] == 0  # the input's own metadata is kept


def test_checks_before_any_work(tmp_path):
    mech = get_mechanism("laplace", epsilon=5.0)
    _shards(tmp_path / "dup", sizes=(5, 5), start=0)
    write_embeddings(tmp_path / "dup" / "s1.parquet", np.ones((3, 8)), ids=[0, 1, 2])
    with pytest.raises(DataError, match="record id 0 appears more than once"):
        protect_shards(tmp_path / "dup", tmp_path / "out", mech, key=KEY)
    _shards(tmp_path / "dims", sizes=(5,))
    write_embeddings(tmp_path / "dims" / "t.parquet", np.ones((3, 4)), ids=[7, 8, 9])
    with pytest.raises(DataError, match="different embedding dimensions"):
        protect_shards(tmp_path / "dims", tmp_path / "out", mech)
    _shards(tmp_path / "ok")
    protect_shards(tmp_path / "ok", tmp_path / "prot", mech, key=KEY)
    with pytest.raises(ValueError, match="already protected"):
        protect_shards(tmp_path / "prot", tmp_path / "again", mech)
    with pytest.raises(ValueError, match="must not contain the input shards"):
        protect_shards(tmp_path / "ok", tmp_path / "ok", mech, overwrite=True)
    with pytest.raises(FileExistsError, match="already exists"):
        protect_shards(tmp_path / "ok", tmp_path / "prot", mech)
    with pytest.raises(ValueError, match="cannot use a seed"):
        protect_shards(tmp_path / "ok", tmp_path / "o", mech, rng=1, engine="ray")
    with pytest.raises(ValueError, match="apply to engine='ray' only"):
        protect_shards(tmp_path / "ok", tmp_path / "o", mech, num_cpus=2)
    X = np.ones((4, 8), dtype=np.float32)
    X[2] = np.inf
    (tmp_path / "bad").mkdir()
    write_embeddings(tmp_path / "bad" / "b.parquet", X, ids=[1, 2, 3, 4])
    with pytest.raises(
        DataError, match=r"b.parquet has 1 row\(s\) with NaN or inf values \(first: row 2\)"
    ):
        protect_shards(tmp_path / "bad", tmp_path / "o", mech, key=KEY)
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_overwrite_replaces_the_output_folder(tmp_path):
    _shards(tmp_path / "in")
    mech = get_mechanism("laplace", epsilon=5.0)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.parquet").write_text("old")
    protect_shards(tmp_path / "in", tmp_path / "out", mech, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["s0.parquet", "s1.parquet"]


def test_ledger_refuses_before_any_output_and_records_the_job_as_one_release(tmp_path):
    _shards(tmp_path / "in")
    mech = get_mechanism("laplace", epsilon=5.0)  # pure 10-LDP per release on unit inputs
    led = tmp_path / "ledger.db"
    s = protect_shards(
        tmp_path / "in", tmp_path / "o1", mech, key=KEY, ledger=led, budget_epsilon=15.0
    )
    assert s["ledger_releases"] == 1
    with Ledger(led) as L:
        assert len({r["batch"] for r in L.export()}) == 1
        assert L.unpublished() == []
    # keyed re-release: free, allowed; a fresh one (new key) would pass the budget: refused
    protect_shards(tmp_path / "in", tmp_path / "o2", mech, key=KEY, ledger=led)
    with pytest.raises(BudgetExceeded, match="50 record"):
        protect_shards(tmp_path / "in", tmp_path / "o3", mech, key=b"x" * 32, ledger=led)
    assert not (tmp_path / "o3").exists()
    with Ledger(led) as L:
        assert len(L.export()) == 100  # 50 fresh + 50 free; the refused job recorded nothing
        assert {(sp.releases, sp.free_releases) for sp in L.spent()} == {(2, 1)}


def test_cli_protect_shards(tmp_path, key_file):
    _shards(tmp_path / "in")
    out = tmp_path / "out"
    args = ["protect-shards", str(tmp_path / "in"), "-o", str(out), "-m", "gaussian"]
    r = runner.invoke(
        app, [*args, "--epsilon", "5", "--delta", "1e-5", "--key-file", str(key_file)]
    )
    assert r.exit_code == 0, r.output
    assert "from 2 shard(s) into 2 file(s)" in r.stderr
    _assert_user_error(
        runner.invoke(app, [*args, "--epsilon", "5", "--delta", "1e-5"]), "already exists"
    )
    _assert_user_error(runner.invoke(app, [*args[:-2]]), "--mechanism is required")
    _assert_user_error(
        runner.invoke(app, [*args, "--epsilon", "5", "-p", "k"]),
        "--param must look like NAME=VALUE",
    )
    _assert_user_error(
        runner.invoke(app, [*args[:-1], "laplace", "--epsilon", "5", "-p", "zz=1", "--overwrite"]),
        "mechanism 'laplace' does not take zz (--zz); it takes epsilon",
    )
    _assert_user_error(
        runner.invoke(app, [*args[:-1], "laplace", "--epsilon", "5", "--engine", "spark"]),
        "is not one of 'local', 'ray'",
    )
    _assert_user_error(
        runner.invoke(
            app,
            [
                "protect-shards",
                str(tmp_path / "nope"),
                "-o",
                str(tmp_path / "x"),
                "-m",
                "laplace",
                "--epsilon",
                "5",
            ],
        ),
        "file not found",
    )
