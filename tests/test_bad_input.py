"""The bad-input battery: every case one ``error:`` line, exit status 2, nothing written, the
input byte-identical -- for ``protect``, ``info``, ``index`` and ``ledger``."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.io import write_embeddings
from privembed.keys.keyed import keygen

runner = CliRunner()


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _ok_parquet(path: Path, n: int = 6, d: int = 8) -> Path:
    write_embeddings(path, np.random.default_rng(0).standard_normal((n, d)), ids=list(range(n)))
    return path


def _rows(path: Path, X: np.ndarray, ids=None) -> Path:
    write_embeddings(path, X, ids=list(range(len(X))) if ids is None else ids)
    return path


def _bad_matrix(value: float) -> np.ndarray:
    X = np.random.default_rng(1).standard_normal((5, 8))
    X[3] = value
    return X


def _deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


# Each case: (name, make(folder) -> list of CLI args, expected fragment of the error message)
Case = tuple[str, Callable[[Path], list[str]], str]

PROTECT = ["protect"]
LAP = ["-m", "laplace", "--epsilon", "5"]


def _protect(src: str, *extra: str, out: str = "out.parquet") -> list[str]:
    return [*PROTECT, src, "-o", out, *extra]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _key(folder: Path) -> str:
    keygen(folder / "k.key")
    return str(folder / "k.key")


def _mask(folder: Path, d: int) -> str:
    np.save(folder / "m.npy", np.ones(d))
    return str(folder / "m.npy")


def _protected(folder: Path) -> str:
    src = _ok_parquet(folder / "e.parquet")
    r = runner.invoke(app, _protect(str(src), *LAP, out=str(folder / "p.parquet")))
    assert r.exit_code == 0, r.output
    return str(folder / "p.parquet")


def _not_a_ledger(folder: Path) -> str:
    db = sqlite3.connect(folder / "x.db")
    db.execute("CREATE TABLE t (a)")
    db.commit()
    db.close()
    return str(folder / "x.db")


def _deep_npz(folder: Path) -> str:
    np.savez(folder / "m.npz", embeddings=np.ones((2, 3)), metadata=np.array(_deep_json()))
    return str(folder / "m.npz")


def _float_ids(folder: Path) -> str:
    lines = [json.dumps({"id": i + 0.5, "embedding": [1.0, 2.0]}) for i in range(3)]
    return str(_write(folder / "fl.jsonl", "\n".join(lines) + "\n"))


def _dups(folder: Path, ids: list[int]) -> str:
    X = np.ones((len(ids), 4)) + np.arange(len(ids))[:, None]
    return str(_rows(folder / "d.parquet", X, ids=ids))


def _ok(folder: Path) -> str:
    return str(_ok_parquet(folder / "e.parquet"))


CASES: list[Case] = [
    ("protect: missing file", lambda f: _protect(str(f / "nope.parquet"), *LAP), "file not found"),
    (
        "protect: corrupt parquet",
        lambda f: _protect(str(_write(f / "c.parquet", "PAR1 garbage" * 50)), *LAP),
        "cannot read",
    ),
    (
        "protect: NaN row",
        lambda f: _protect(str(_rows(f / "n.parquet", _bad_matrix(np.nan))), *LAP),
        "NaN or inf",
    ),
    (
        "protect: inf row",
        lambda f: _protect(str(_rows(f / "i.parquet", _bad_matrix(np.inf))), *LAP),
        "NaN or inf",
    ),
    (
        "protect: zero row",
        lambda f: _protect(str(_rows(f / "z.parquet", _bad_matrix(0.0))), *LAP),
        "all-zero row",
    ),
    (
        "protect: dimension mismatch with a mask",
        lambda f: _protect(_ok(f), "-m", "mahalanobis", "--epsilon", "5", "--mask", _mask(f, 5)),
        "dimension mismatch",
    ),
    (
        "protect: negative epsilon",
        lambda f: _protect(_ok(f), "-m", "laplace", "--epsilon", "-1"),
        "epsilon must be > 0",
    ),
    (
        "protect: epsilon not a number",
        lambda f: _protect(_ok(f), "-m", "laplace", "--epsilon", "ten"),
        "Invalid value for '--epsilon'",
    ),
    (
        "protect: epsilon so small the noise scale is infinite",
        lambda f: _protect(_ok(f), "-m", "laplace", "--epsilon", "1e-320"),
        "too small",
    ),
    (
        "protect: unknown mechanism",
        lambda f: _protect(_ok(f), "-m", "laplas", "--epsilon", "1"),
        "'laplas' is not one of 'gaussian'",
    ),
    (
        "protect: missing parameter",
        lambda f: _protect(_ok(f), "-m", "gaussian", "--epsilon", "1"),
        "needs delta (--delta)",
    ),
    (
        "protect: parameter the mechanism does not take",
        lambda f: _protect(_ok(f), *LAP, "--delta", "1e-5"),
        "does not take delta",
    ),
    (
        "protect: unsupported output format",
        lambda f: _protect(_ok(f), *LAP, out="out.csv"),
        "unsupported file format",
    ),
    (
        "protect: output equals input",
        lambda f: _protect(_ok(f), *LAP, "--overwrite", out=str(f / "e.parquet")),
        "output must differ from the input",
    ),
    (
        "protect: JSON nested 100k deep",
        lambda f: _protect(
            str(_write(f / "deep.jsonl", '{"id": 1, "embedding": ' + _deep_json() + "}\n")), *LAP
        ),
        "nested too deeply",
    ),
    (
        "protect: projection matrix too large for memory",
        lambda f: _protect(
            _ok(f), "-m", "projection", "--k", "100000000", "--epsilon", "1", "--delta", "1e-5"
        ),
        "choose a smaller k",
    ),
    (
        "protect: float ids with a key",
        lambda f: _protect(_float_ids(f), *LAP, "--key-file", _key(f)),
        "record id must be an int or a string",
    ),
    (
        "protect: duplicate ids across batches",
        lambda f: _protect(
            _dups(f, [1, 2, 3, 4, 5, 3]), *LAP, "--key-file", _key(f), "--batch-rows", "2"
        ),
        "repeated: 3",
    ),
    (
        "protect: duplicate ids with a new ledger",
        lambda f: _protect(_dups(f, [1, 2, 1]), *LAP, "--ledger", str(f / "new.db")),
        "repeated: 1",
    ),
    ("protect: already protected", lambda f: _protect(_protected(f), *LAP), "already protected"),
    ("info: missing file", lambda f: ["info", str(f / "nope.parquet")], "file not found"),
    (
        "info: corrupt npz",
        lambda f: ["info", str(_write(f / "c.npz", "PK not a zip"))],
        "cannot read",
    ),
    ("info: metadata nested 100k deep", lambda f: ["info", _deep_npz(f)], "nested too deeply"),
    (
        "index: NaN row",
        lambda f: [
            "index",
            str(_rows(f / "n.parquet", _bad_matrix(np.nan))),
            "--store",
            "faiss",
            "--path",
            str(f / "db"),
            *LAP,
        ],
        "NaN or inf",
    ),
    (
        "index: duplicate ids with a ledger",
        lambda f: [
            "index",
            _dups(f, [1, 2, 1, 3]),
            "--store",
            "faiss",
            "--path",
            str(f / "db"),
            *LAP,
            "--ledger",
            str(f / "l.db"),
        ],
        "repeated: 1",
    ),
    (
        "ledger show: not a ledger",
        lambda f: ["ledger", "show", _not_a_ledger(f)],
        "not a privembed ledger",
    ),
    ("ledger spent: missing", lambda f: ["ledger", "spent", str(f / "nope.db")], "not found"),
]


@pytest.mark.parametrize(("name", "make", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_one_line_nonzero_nothing_written(tmp_path, monkeypatch, name, make, needle):
    monkeypatch.chdir(tmp_path)
    args = make(tmp_path)
    before = _digest(tmp_path)
    r = runner.invoke(app, args)
    err = r.stderr.strip()
    assert r.exit_code == 2, (name, r.exit_code, r.output)  # usage and data errors: 2
    assert err.startswith("error: ") and len(err.splitlines()) == 1, (name, err)
    assert needle in " ".join(err.split()), (name, err)
    assert "Traceback" not in r.output
    after = _digest(tmp_path)
    # the inputs are byte-identical and nothing new was written (no output, temporaries,
    # ledger or store)
    assert after == before, (name, set(after) ^ set(before))
