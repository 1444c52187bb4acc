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


def test_serve_init_starts_from_the_saved_recommendation(emb, tmp_path):
    """serve --init --from-advice: the documents model takes the recommendation's mechanism and
    epsilon -- for a sealed recommendation (no vector to serve) the best re-rank or plain
    setting of the same advice, which the config's comment names."""
    from privembed.cli import app
    from privembed.evaluation.modes import advise_modes
    from privembed.server import load_config

    saved = tmp_path / "advice.json"
    r = CliRunner().invoke(app, ["advise", str(emb), "--save", str(saved)])
    assert r.exit_code == 0, r.output
    cfg_path = tmp_path / "serve.toml"
    r = CliRunner().invoke(
        app, ["serve", "--init", "--config", str(cfg_path), "--from-advice", str(saved)]
    )
    assert r.exit_code == 0, r.output
    cfg = load_config(cfg_path)
    model = cfg.models["minilm-private"]
    text = cfg_path.read_text()
    from privembed.data.io import read_embeddings

    adv = advise_modes(np.asarray(read_embeddings(emb).X), seed=0)
    assert adv.recommended is not None and adv.recommended.mode == "sealed"
    want = adv.recommended_noise
    assert want is not None
    assert f'mechanism = "{want.config["mechanism"]}"' in text
    assert f"epsilon = {float(want.epsilon)!r}" in text
    assert "the sealed mode, which the proxy cannot serve" in text
    assert model.mechanism(None).config["epsilon"] == pytest.approx(want.epsilon)


def test_from_advice_needs_init_and_a_saved_recommendation(tmp_path):
    from privembed.cli import app

    bad = tmp_path / "x.json"
    bad.write_text("{}")
    r = CliRunner().invoke(app, ["serve", "--from-advice", str(bad)])
    assert r.exit_code != 0 and "--init" in r.output
    r = CliRunner().invoke(
        app, ["serve", "--init", "--config", str(tmp_path / "s.toml"), "--from-advice", str(bad)]
    )
    assert r.exit_code != 0 and "not a saved recommendation" in r.output
    assert not (tmp_path / "s.toml").exists() and not (tmp_path / "s.key").exists()
