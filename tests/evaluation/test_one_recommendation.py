"""One recommendation everywhere (issue 37.4): advise, evaluate (its output, its report and its
advice.json) make the same deployment recommendation for the same input."""

from __future__ import annotations

import json
from html import unescape

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed.evaluation.modes import ADVICE_FORMAT, load_advice

from .test_modes import _corpus


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    from privembed.data.io import write_embeddings

    X, _ = _corpus(n=240, d=32)
    path = tmp_path_factory.mktemp("one") / "emb.parquet"
    write_embeddings(path, X.astype(np.float32), ids=[f"r{i}" for i in range(len(X))])
    return path


def test_advise_evaluate_and_the_report_recommend_the_same(emb, tmp_path):
    from privembed.cli import app

    saved = tmp_path / "advice.json"
    adv = CliRunner().invoke(app, ["advise", str(emb), "--json", "--save", str(saved)])
    assert adv.exit_code == 0, adv.output
    answer = json.loads(adv.stdout)["answer"]
    assert load_advice(saved)["answer"] == answer
    out = tmp_path / "report"
    ev = CliRunner().invoke(
        app,
        ["evaluate", str(emb), "-o", str(out), "--mechanisms", "laplace", "--epsilon", "50",
         "--runs", "1", "--n-queries", "0"],
    )  # fmt: skip
    assert ev.exit_code == 0, ev.output
    assert " ".join(answer.split()) in " ".join(ev.stdout.split())
    doc = load_advice(out / "advice.json")
    assert doc["format"] == ADVICE_FORMAT and doc["answer"] == answer
    assert doc["recommended"] == json.loads(saved.read_text())["recommended"]
    html = (out / "index.html").read_text()
    assert "Deployment recommendation" in html and 'id="deployment-modes"' in html
    assert " ".join(answer.split()) in " ".join(unescape(html).split())


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "not found"), ("{not json", "not JSON"), ('{"answer": "x"}', "not a saved")],
)
def test_a_bad_advice_file_is_refused_in_one_line(tmp_path, content, match):
    from privembed.core._validation import DataError

    p = tmp_path / "a.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(DataError, match=match):
        load_advice(p)
