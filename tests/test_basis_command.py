"""privembed basis (issue 37.5): a subspace basis fitted once -- DP-PCA charged once in the
ledger, or public data -- and reused by index, protect and advise without refitting or charging
again; a refused charge writes no file and leaves the ledger as it was."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.cli import app

runner = CliRunner()


@pytest.fixture
def corpus(tmp_path):
    from privembed.data.io import write_embeddings

    rng = np.random.default_rng(0)
    B = rng.standard_normal((4, 16))
    X = (rng.standard_normal((3000, 4)) * [5, 4, 3, 2]) @ B + 0.1 * rng.standard_normal((3000, 16))
    path = tmp_path / "emb.parquet"
    write_embeddings(path, X.astype(np.float32), ids=[f"r{i}" for i in range(3000)])
    return path


def _basis_batches(ledger) -> list[dict]:
    r = runner.invoke(app, ["ledger", "show", str(ledger), "--json"])
    assert r.exit_code == 0, r.output
    confs = json.loads(r.stdout)["configurations"]
    return [c for c in confs if (c["mechanism"] or {}).get("mechanism") == "subspace-basis"]


def _sha(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_dp_pca_basis_is_charged_once_and_reused_without_refitting(corpus, tmp_path):
    led, basis, key = tmp_path / "l.db", tmp_path / "basis.npz", tmp_path / "k.key"
    assert runner.invoke(app, ["keygen", "-o", str(key)]).exit_code == 0
    r = runner.invoke(app, ["basis", str(corpus), "-o", str(basis), "--basis", "dp-pca",
                            "--basis-epsilon", "5", "--basis-delta", "1e-5", "--ledger", str(led),
                            "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["records"] == 3000 and summary["charge"]["fresh"] == 3000
    assert "(5, 1e-05)" in summary["guarantee"]
    before = _sha(basis)
    for store in ("s1", "s2"):  # two indexes with the saved basis: no refit, no second charge
        r = runner.invoke(app, ["index", str(corpus), "--store", "faiss", "--path",
                                str(tmp_path / store), "-m", "subspace", "--basis", str(basis),
                                "-e", "50", "--key-file", str(key), "--ledger", str(led)])  # fmt: skip
        assert r.exit_code == 0, r.output
    (b,) = _basis_batches(led)
    assert b["batches"] == 1 and b["releases"] == 3000
    assert _sha(basis) == before  # the file is read, never rewritten
    # the release's guarantee is the composition: the basis' epsilon is in its configuration
    r = runner.invoke(app, ["ledger", "show", str(led), "--json"])
    subspace = [c for c in json.loads(r.stdout)["configurations"]
                if (c["mechanism"] or {}).get("mechanism") == "subspace"]  # fmt: skip
    assert subspace and subspace[0]["mechanism"]["basis_epsilon"] == 5.0
    # advise reads the same file
    r = runner.invoke(app, ["advise", str(corpus), "--modes", "subspace+rerank", "--mechanisms",
                            "laplace", "--basis", str(basis), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert _basis_batches(led)[0]["batches"] == 1


def test_a_refused_charge_writes_no_basis_and_changes_nothing(corpus, tmp_path):
    led, basis = tmp_path / "l.db", tmp_path / "basis.npz"
    assert runner.invoke(app, ["ledger", "budget", str(led), "-e", "1"]).exit_code == 0
    before = _sha(led)
    r = runner.invoke(app, ["basis", str(corpus), "-o", str(basis), "--basis", "dp-pca",
                            "--basis-epsilon", "5", "--basis-delta", "1e-5", "--ledger", str(led)])  # fmt: skip
    assert r.exit_code != 0 and "budget" in r.output.lower()
    assert not basis.exists() and _sha(led) == before
    assert not list(tmp_path.glob("basis.npz*"))  # no temporary left either


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--ledger", "l.db"], "costs no privacy"),
        (["--basis-epsilon", "1"], "DP-PCA basis"),
        (["--basis", "pca"], "'dp-pca' or 'public'"),
    ],
)
def test_bad_requests_are_refused_in_one_line_and_write_nothing(corpus, tmp_path, extra, match):
    basis = tmp_path / "basis.npz"
    args = ["basis", str(corpus), "-o", str(basis), *extra]
    r = runner.invoke(app, [a.replace("l.db", str(tmp_path / "l.db")) for a in args])
    assert r.exit_code != 0 and match in r.output
    assert not basis.exists() and not (tmp_path / "l.db").exists()


def test_an_existing_basis_is_not_replaced_without_overwrite(corpus, tmp_path):
    basis, led = tmp_path / "basis.npz", tmp_path / "l.db"
    basis.write_bytes(b"keep me")
    r = runner.invoke(app, ["basis", str(corpus), "-o", str(basis), "--basis", "dp-pca",
                            "--basis-epsilon", "5", "--basis-delta", "1e-5", "--ledger", str(led)])  # fmt: skip
    assert r.exit_code != 0 and "--overwrite" in r.output
    assert basis.read_bytes() == b"keep me"
    assert not _basis_batches(led) if led.exists() else True


def test_a_public_basis_is_exact_pca_and_costs_nothing(corpus, tmp_path):
    from privembed.mechanisms.subspace import SubspaceBasis

    basis = tmp_path / "basis.npz"
    r = runner.invoke(app, ["basis", str(corpus), "-o", str(basis), "--json"])
    assert r.exit_code == 0, r.output
    b = SubspaceBasis.load(basis)
    assert b.guarantee is None and json.loads(r.stdout)["charge"] is None
