"""A seed is refused with a ledger, by every front end, before anything is read or written
(issue 39, item 3).

The attack: seeded noise is a function of the seed and the row's place, not of the content, so
an edited record released again at its place gets the same noise, and the difference of the two
outputs is the clean difference exactly -- while the ledger composed the two as independent
releases (a budget that promised what the noise did not give).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import LaplaceMechanism
from privembed.cli import app
from privembed.data.io import write_embeddings
from privembed.keys.ledger import Ledger
from privembed.release import Release, protect_file

runner = CliRunner()
WHY = "--seed cannot be used with --ledger"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def inputs(tmp_path):
    """An embeddings file, a shard folder and an existing ledger with one release."""
    X = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    src = tmp_path / "e.parquet"
    write_embeddings(src, X, ids=[f"n{i}" for i in range(6)])
    (tmp_path / "shards").mkdir()
    write_embeddings(tmp_path / "shards" / "a.parquet", X, ids=[f"n{i}" for i in range(6)])
    led = tmp_path / "l.db"
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "first.parquet"), "-m",
                            "laplace", "--epsilon", "20", "--ledger", str(led)])  # fmt: skip
    assert r.exit_code == 0, r.output
    return src, X, led


def _said(r) -> str:
    err = r.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    return " ".join(err.split())


def test_every_command_refuses_a_seed_with_a_ledger_and_writes_nothing(tmp_path, inputs):
    src, X, led = inputs
    before = _sha(led)
    new_led = tmp_path / "new.db"
    common = ["-m", "laplace", "--epsilon", "20", "--seed", "3"]
    runs = {
        "protect": ["protect", src, "-o", tmp_path / "o.parquet", *common],
        "index": ["index", src, "--store", "faiss", "--path", tmp_path / "db", *common],
        "protect-stream": ["protect-stream", *common, "-o", tmp_path / "s.jsonl"],
        "protect-shards": ["protect-shards", tmp_path / "shards", "-o", tmp_path / "out", *common],
    }
    lines = "".join(json.dumps({"id": f"n{i}", "embedding": x.tolist()}) + "\n"
                    for i, x in enumerate(X))  # fmt: skip
    for name, args in runs.items():
        for ledger in (led, new_led):
            r = runner.invoke(app, [str(a) for a in [*args, "--ledger", ledger]], input=lines)
            assert r.exit_code == 2, (name, r.output)
            assert WHY in _said(r) and "clean difference" in _said(r), (name, r.stderr)
            assert _sha(led) == before and not new_led.exists(), name
        for out in ("o.parquet", "db", "s.jsonl", "out"):
            assert not (tmp_path / out).exists(), (name, out)
    # without the ledger the seed is an experiment's, as before
    r = runner.invoke(app, [str(a) for a in runs["protect"]])
    assert r.exit_code == 0, r.output


def test_the_python_front_ends_refuse_a_seed_with_a_ledger(tmp_path, inputs):
    """protect_file, the stream, the shards, a collection's index and a Release itself."""
    from privembed.integrations.collection import index_file
    from privembed.integrations.shards import protect_shards
    from privembed.integrations.stream import protect_stream

    src, _, led = inputs
    before = _sha(led)
    mech = LaplaceMechanism(epsilon=20.0)
    with pytest.raises(ValueError, match=r"seed cannot be used with --ledger.*clean difference"):
        protect_file(src, tmp_path / "o.parquet", mech, rng=1, ledger=led)
    stdin = io.BytesIO(b'{"id": "a", "embedding": [1, 0, 0]}\n')
    with Ledger(led) as L:
        with pytest.raises(ValueError, match=r"seed cannot be used with .*clean difference"):
            protect_stream(stdin, io.BytesIO(), mech, rng=1, ledger=L)
        assert stdin.tell() == 0  # refused before reading
        with pytest.raises(ValueError, match=r"seed cannot be used with .*clean difference"):
            index_file(src, "faiss", tmp_path / "db", mechanism=mech, rng=1, ledger=L)
        with pytest.raises(ValueError, match=r"seed cannot be used with .*clean difference"):
            Release(mech, rng=1, ledger=L)
    with pytest.raises(ValueError, match=r"seed cannot be used with .*clean difference"):
        protect_shards(tmp_path / "shards", tmp_path / "out", mech, rng=1, ledger=led)
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "out").exists()
    assert not (tmp_path / "db").exists() and _sha(led) == before


def test_what_a_seed_would_have_let_through(tmp_path):
    """Why: two seeded releases of an edited record at one place share their noise exactly, so
    their difference is the clean difference -- the release the ledger would have charged as
    independent. Keyed noise (the ledger's) gives the edit independent noise."""
    X = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    edited = X.copy()
    edited[0] += 0.5
    mech = LaplaceMechanism(epsilon=5.0, renormalize=False)
    a = Release(mech, rng=7).protect(X, ids=["r", "s"])
    b = Release(mech, rng=7).protect(edited, ids=["r", "s"])
    unit = lambda M: M / np.linalg.norm(M, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(b[0] - a[0], unit(edited)[0] - unit(X)[0], atol=1e-5)
    with Ledger(tmp_path / "l.db") as L:
        with pytest.raises(ValueError, match="seed"):
            Release(mech, rng=7, ledger=L)
