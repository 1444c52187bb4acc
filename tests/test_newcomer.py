"""A newcomer's first hour (issue 28): one test per finding, through the command line."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.cli import app
from privembed.io import write_embeddings

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
