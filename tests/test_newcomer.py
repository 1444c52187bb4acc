"""A newcomer's first hour (issue 28): one test per finding, through the command line."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.data.io import write_embeddings

runner = CliRunner()


def _one_line_error(r, needle: str) -> None:
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split())
    assert err.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in err, err


@pytest.mark.parametrize("command", ["evaluate", "advise"])
def test_3_evaluate_and_advise_refuse_an_already_protected_file(tmp_path, command):
    """Finding 3: ``privembed evaluate gauss.parquet`` reported reid@1 1.000 "on unprotected
    embeddings" for vectors that were already protected."""
    X = np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32)
    src = tmp_path / "emb.parquet"
    write_embeddings(src, X, ids=list(range(40)))
    prot = tmp_path / "gauss.parquet"
    r = runner.invoke(app, ["protect", str(src), "-o", str(prot), "-m", "gaussian",
                            "--epsilon", "50", "--delta", "1e-5", "-q"])  # fmt: skip
    assert r.exit_code == 0, r.output
    extra = ["-o", str(tmp_path / "eval")] if command == "evaluate" else []
    r = runner.invoke(app, [command, str(prot), *extra])
    _one_line_error(r, "gauss.parquet is already protected")
    assert "give the unprotected file" in " ".join(r.stderr.split())


def test_9_protect_output_says_each_thing_once_and_never_contradicts_the_ledger(tmp_path):
    """Finding 9: a free keyed re-release printed '... free ..., 0 charged' and then 'charged
    100-LDP per record'; the guarantee was printed twice; the Mahalanobis guarantee read
    '... Mahalanobis distance ||Sigma^-1/2 distance'; ledger ids showed as 'note-00000' in the
    table and 's:note-00000' in JSON."""
    X = np.random.default_rng(0).standard_normal((12, 8)).astype(np.float32)
    src = tmp_path / "emb.jsonl"
    write_embeddings(src, X, ids=[f"note-{i:05d}" for i in range(11)] + [7])
    key = tmp_path / "k.key"
    assert runner.invoke(app, ["keygen", "-o", str(key)]).exit_code == 0
    led = tmp_path / "l.db"
    args = ["protect", str(src), "-m", "laplace", "--epsilon", "50", "--key-file", str(key),
            "--ledger", str(led)]  # fmt: skip
    first = runner.invoke(app, [*args, "-o", str(tmp_path / "a.jsonl")])
    again = runner.invoke(app, [*args, "-o", str(tmp_path / "b.jsonl")])
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    one = " ".join(first.stderr.split())
    two = " ".join(again.stderr.split())
    assert "12 record(s) charged 100-LDP per record" in one
    assert "nothing charged" in two and "charged 100-LDP" not in two
    for text in (one, two):
        assert text.count("guarantee:") == 1 and text.count("50-d_X privacy") == 1
    cov = tmp_path / "cov.npy"
    np.save(cov, np.linspace(0.5, 1.5, 8))
    r = runner.invoke(app, ["protect", str(src), "-o", str(tmp_path / "m.jsonl"), "-m",
                            "mahalanobis", "--epsilon", "10", "--covariance", str(cov)])  # fmt: skip
    assert r.exit_code == 0, r.output
    m = " ".join(r.stderr.split())
    assert "Mahalanobis distance ||Sigma^-1/2 (x - x')||" in m and "||Sigma^-1/2 distance" not in m
    assert "per unit of Mahalanobis distance on unit vectors" in m
    table = runner.invoke(app, ["ledger", "spent", str(led)])
    js = runner.invoke(app, ["ledger", "spent", str(led), "--json"])
    import json

    rows = json.loads(js.stdout)
    assert {r["id"] for r in rows} == {f"note-{i:05d}" for i in range(11)} | {7}
    assert "'note-00000'" in table.stdout and "s:note-00000" not in table.stdout


def test_9_embed_says_which_backend_ran(tmp_path):
    import json

    notes = tmp_path / "n.txt"
    notes.write_text("the patient has diabetes\nstock markets fell\n")
    r = runner.invoke(app, ["embed", str(notes), "-o", str(tmp_path / "e.npz"), "--json",
                            "--backend", "onnx"])  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["embedding_backend"] == "onnx"
    assert out["embedding_model_identity"].startswith("all-MiniLM-L6-v2@")
