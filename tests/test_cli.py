"""Command line: the happy path on small files, and every kind of bad input.

Each bad input must give a one-line ``error: ...`` naming the problem, a non-zero exit code,
no traceback, and no output file.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.io import read_embeddings, read_metadata, write_embeddings

runner = CliRunner()


def _emb(tmp_path, name="e.parquet", n=20, d=16, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    p = tmp_path / name
    write_embeddings(p, X, ids=[f"r{i}" for i in range(n)], metadata={"embedding_model": "toy"})
    return p, X


def _assert_user_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: "), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in result.output
    assert pattern in err, err


@pytest.mark.parametrize(
    "mech,opts",
    [
        ("gaussian", ["--epsilon", "5", "--delta", "1e-5"]),
        ("empirical", ["--sigma", "0.2"]),
        ("laplace", ["--epsilon", "10"]),
        ("purkayastha", ["--epsilon", "10"]),
        ("mahalanobis", ["--epsilon", "10", "--smoothing", "0.5"]),
    ],
)
def test_protect_happy_path_writes_metadata(tmp_path, mech, opts):
    src, X = _emb(tmp_path)
    out = tmp_path / "p.parquet"
    r = runner.invoke(app, ["protect", str(src), "-o", str(out), "-m", mech, *opts, "--seed", "3"])
    assert r.exit_code == 0, r.output
    t = read_embeddings(out)
    assert t.X.shape == X.shape and t.X.dtype == np.float32
    assert not np.allclose(t.X, X)
    meta = t.metadata
    assert meta["protected"] is True and meta["mechanism"]["mechanism"] == mech
    assert meta["embedding_model"] == "toy" and "guarantee" in meta
    # same seed -> same output
    out2 = tmp_path / "p2.parquet"
    runner.invoke(app, ["protect", str(src), "-o", str(out2), "-m", mech, *opts, "--seed", "3"])
    np.testing.assert_array_equal(read_embeddings(out2).X, t.X)


def test_protect_mahalanobis_with_mask_file(tmp_path):
    src, _ = _emb(tmp_path)
    mask = tmp_path / "m.npy"
    np.save(mask, (np.arange(16) < 4).astype(float))
    out = tmp_path / "p.parquet"
    r = runner.invoke(
        app,
        [
            "protect",
            str(src),
            "-o",
            str(out),
            "-m",
            "mahalanobis",
            "--epsilon",
            "10",
            "--mask",
            str(mask),
            "--seed",
            "0",
        ],
    )
    assert r.exit_code == 0, r.output
    cfg = read_metadata(out)["mechanism"]
    assert (
        cfg["mechanism"] == "mahalanobis" and len(cfg["mask"]) == 16 and cfg["covariance"] is None
    )


def test_info_shows_rows_dim_and_metadata(tmp_path):
    src, _ = _emb(tmp_path)
    r = runner.invoke(app, ["info", str(src), "--json"])
    assert r.exit_code == 0
    rep = json.loads(r.stdout)
    assert rep["rows"] == 20 and rep["dim"] == 16 and rep["metadata"]["embedding_model"] == "toy"


def test_reprotect_refused_unless_asked(tmp_path):
    src, _ = _emb(tmp_path)
    p1 = tmp_path / "p1.parquet"
    runner.invoke(app, ["protect", str(src), "-o", str(p1), "-m", "laplace", "--epsilon", "5"])
    p2 = tmp_path / "p2.parquet"
    r = runner.invoke(app, ["protect", str(p1), "-o", str(p2), "-m", "laplace", "--epsilon", "5"])
    _assert_user_error(r, "already protected")
    assert not p2.exists()
    r = runner.invoke(
        app,
        ["protect", str(p1), "-o", str(p2), "-m", "laplace", "--epsilon", "5", "--allow-reprotect"],
    )
    assert r.exit_code == 0
    assert "previous_protection" in read_metadata(p2)


# ---------------------------------------------------------------------------------- bad input


def _bad_rows(tmp_path, kind):
    X = np.random.default_rng(1).standard_normal((30, 8))
    if kind == "nan":
        X[17, 3] = np.nan
    elif kind == "inf":
        X[25, 0] = np.inf
    else:
        X[20] = 0.0
    p = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"embedding": pa.array(X.tolist())}), p)
    return p


@pytest.mark.parametrize(
    ("kind", "msg"),
    [
        ("nan", "bad.parquet has 1 row(s) with NaN or inf values (first: row 17)."),
        ("inf", "NaN or inf values"),
        ("zero", "all-zero row(s) (first: row 20)"),
    ],
)
def test_bad_rows(tmp_path, kind, msg):
    p = _bad_rows(tmp_path, kind)
    before = p.read_bytes()
    out = tmp_path / "out.parquet"
    r = runner.invoke(
        app,
        ["protect", str(p), "-o", str(out), "-m", "laplace", "--epsilon", "1", "--batch-rows", "8"],
    )
    _assert_user_error(r, msg)
    assert not out.exists() and p.read_bytes() == before
    assert sorted(f.name for f in tmp_path.iterdir()) == ["bad.parquet"]


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["-m", "laplace", "--epsilon", "-1"], "epsilon must be > 0, got epsilon=-1."),
        (["-m", "gaussian", "--epsilon", "1", "--delta", "2"], "delta must be < 1, got delta=2."),
        (["-m", "gaussian", "--epsilon", "1"], "delta"),
        (["-m", "laplas", "--epsilon", "1"], "'laplas' is not one of 'gaussian'"),
        (
            ["-m", "gaussian", "--epsilon", "1", "--delta", "1e-5", "--calibration", "exact"],
            "'exact' is not one of 'analytic', 'classic'.",
        ),
        (
            ["-m", "mahalanobis", "--epsilon", "1", "--smoothing", "1.5"],
            "smoothing must be <= 1, got smoothing=1.5.",
        ),
    ],
)
def test_invalid_parameters(tmp_path, args, msg):
    src, _ = _emb(tmp_path)
    out = tmp_path / "out.parquet"
    r = runner.invoke(app, ["protect", str(src), "-o", str(out), *args])
    _assert_user_error(r, msg)
    assert not out.exists()


def test_missing_file(tmp_path):
    out = tmp_path / "o.parquet"
    r = runner.invoke(
        app,
        [
            "protect",
            str(tmp_path / "nope.parquet"),
            "-o",
            str(out),
            "-m",
            "laplace",
            "--epsilon",
            "1",
        ],
    )
    _assert_user_error(r, "file not found")
    assert not out.exists()
    r = runner.invoke(app, ["info", str(tmp_path / "nope.npy")])
    _assert_user_error(r, "file not found")


def test_wrong_format(tmp_path):
    src, _ = _emb(tmp_path)
    r = runner.invoke(
        app, ["protect", str(src), "-o", str(tmp_path / "o.csv"), "-m", "laplace", "--epsilon", "1"]
    )
    _assert_user_error(r, "unsupported file format '.csv'")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 garbage")
    out = tmp_path / "o.parquet"
    r = runner.invoke(app, ["protect", str(bad), "-o", str(out), "-m", "laplace", "--epsilon", "1"])
    _assert_user_error(r, "as Parquet")
    assert not out.exists()


def test_dimension_mismatch(tmp_path):
    src, _ = _emb(tmp_path, d=16)
    mask = tmp_path / "m.npy"
    np.save(mask, np.ones(10))
    out = tmp_path / "o.parquet"
    r = runner.invoke(
        app,
        [
            "protect",
            str(src),
            "-o",
            str(out),
            "-m",
            "mahalanobis",
            "--epsilon",
            "1",
            "--mask",
            str(mask),
        ],
    )
    _assert_user_error(r, "dimension mismatch")
    assert not out.exists()
    ragged = tmp_path / "r.parquet"
    pq.write_table(pa.table({"embedding": pa.array([[1.0, 2.0], [1.0, 2.0, 3.0]])}), ragged)
    r = runner.invoke(
        app, ["protect", str(ragged), "-o", str(out), "-m", "laplace", "--epsilon", "1"]
    )
    _assert_user_error(r, "dimension mismatch")
    assert not out.exists()


def test_output_same_as_input_refused(tmp_path):
    src, _ = _emb(tmp_path)
    before = src.read_bytes()
    r = runner.invoke(
        app, ["protect", str(src), "-o", str(src), "-m", "laplace", "--epsilon", "1", "--overwrite"]
    )
    _assert_user_error(r, "output must differ from the input")
    assert src.read_bytes() == before


def test_help_on_every_command():
    for cmd in ([], ["embed"], ["protect"], ["info"], ["demo"]):
        r = runner.invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0 and "Usage" in r.stdout


def test_protect_projection_records_public_projection_and_ledger(tmp_path):
    src, _ = _emb(tmp_path, d=32)
    out = tmp_path / "p.parquet"
    led = tmp_path / "l.db"
    r = runner.invoke(
        app,
        [
            "protect",
            str(src),
            "-o",
            str(out),
            "-m",
            "projection",
            "--k",
            "8",
            "--epsilon",
            "50",
            "--delta",
            "1e-5",
            "--kind",
            "srht",
            "--projection-seed",
            "7",
            "--ledger",
            str(led),
        ],
    )
    assert r.exit_code == 0, r.output
    t = read_embeddings(out)
    assert t.X.shape == (20, 8)
    proj = t.metadata["projection"]
    assert proj["kind"] == "srht" and proj["k"] == 8 and proj["d"] == 32 and proj["seed"] == 7
    assert proj["sigma"] > 0 and proj["sensitivity"] > 2.0  # 2 * ||P||_2 > 2 for k < d
    r = runner.invoke(app, ["ledger", "spent", str(led), "--json"])
    assert r.exit_code == 0 and '"releases": 1' in r.stdout


def test_an_interrupt_inside_an_import_is_an_interrupt():
    """Ctrl-C while a C extension is being imported (pyarrow imports pandas lazily in the first
    batch) surfaces as SystemError/AttributeError caused by the KeyboardInterrupt; the CLI
    treats it as the interrupt it is (one line, exit 130), not as a crash with a traceback."""
    from privembed._cli.common import user_errors

    @user_errors
    def interrupted_import() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            try:
                raise AttributeError("partially initialized module 'pandas'") from ki
            except AttributeError as inner:
                raise SystemError("returned a result with an exception set") from inner

    import typer

    with pytest.raises(typer.Exit) as info:
        interrupted_import()
    assert info.value.exit_code == 130

    @user_errors
    def plain_bug() -> None:
        raise SystemError("not an interrupt")

    with pytest.raises(SystemError, match="not an interrupt"):
        plain_bug()
