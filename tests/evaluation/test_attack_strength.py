"""Attacks prove their strength: each is run on unprotected embeddings against its blind
baseline first; one that does not beat chance is labelled and left out of the leakage plots,
and the default settings do beat chance on the demo and PII corpora."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privembed.evaluation import WEAK_ATTACK, Linkage, TokenLeakage, grid, run_sweep
from privembed.evaluation.pipeline import token_attack
from privembed.evaluation.privacy import CellRelease, Unprotected
from privembed.evaluation.report import frontier_axes, recommend, write_report


def _plain(X, seed=0):
    ident = Unprotected()
    return CellRelease(ident, X, ident.privatize(X), np.random.default_rng(seed))


def _unrelated(n=120, d=16, seed=0):
    """Random vectors and random 3-word texts drawn independently of them: nothing to learn."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(12)]
    X = rng.standard_normal((n, d))
    texts = [" ".join(rng.choice(words, 3, replace=False)) for _ in range(n)]
    return X, texts


def test_an_attack_at_chance_on_clean_data_is_labelled_and_not_plotted(tmp_path):
    """Texts unrelated to the vectors: the token attacker's leakage cannot beat the blind
    attacker's (95% paired bootstrap interval of the difference includes 0 or is below it)."""
    X, texts = _unrelated()
    tok = token_attack(X, texts, attack={"hidden": [16], "epochs": 2, "lr": 1e-3, "top_k": 3})
    res = run_sweep(X, grid(["laplace"], epsilon=[5, 50]), runs=1, seed=0, privacy=[Linkage(), tok])
    check = res.checks["token_inference"]
    assert not check.passed and check.status == WEAK_ATTACK and check.excess_low <= 0
    assert res.checks["linkage"].passed  # unprotected linkage: every record, chance 1/120
    for col in ("leakage", "confidence", "auc_sensitive", "leakage_chance"):
        assert res.attack_status(col) == WEAK_ATTACK
    assert "leakage" not in res.evidence_columns()
    rows = [r for r in res.summary() if r["metric"] == "leakage"]
    assert rows and all(r["attack_status"] == WEAK_ATTACK for r in rows)
    rec = recommend(res)
    assert all(f.metric != "leakage_excess_low" for f in rec.ceilings)
    assert frontier_axes(res, rec)[1] == "reid@1"  # the frontier plots linkage, never leakage
    res.save(tmp_path)
    csv = (tmp_path / "results.csv").read_text()
    assert WEAK_ATTACK in csv
    html = write_report(res, tmp_path).read_text()
    assert "Are the attacks strong enough?" in html and WEAK_ATTACK in html
    # the result file keeps the verdicts
    from privembed.evaluation import SweepResult

    back = SweepResult.from_json(json.loads((tmp_path / "results.json").read_text()))
    assert back.checks["token_inference"].status == WEAK_ATTACK


def test_the_evaluate_command_labels_a_weak_attack(tmp_path):
    from privembed._cli.evaluate import register
    from privembed.data.io import write_embeddings

    X, texts = _unrelated(80)
    ids = [f"r{i}" for i in range(80)]
    write_embeddings(tmp_path / "emb.npz", X.astype(np.float32), ids=ids)
    with (tmp_path / "t.jsonl").open("w") as fh:
        for i, t in zip(ids, texts, strict=True):
            fh.write(json.dumps({"id": i, "text": t}) + "\n")
    app = typer.Typer()
    register(app)
    app.command(name="noop")(lambda: None)  # two commands: typer keeps subcommand names
    args = ["evaluate", str(tmp_path / "emb.npz"), "-o", str(tmp_path / "r"),
            "--mechanisms", "laplace", "--epsilon", "5,50", "--runs", "1",
            "--texts", str(tmp_path / "t.jsonl"), "--attack-epochs", "2", "--n-queries", "0"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    assert "token_inference: leakage" in out and WEAK_ATTACK in out
    assert "linkage: reid@1 1.000 on unprotected embeddings" in out
    assert WEAK_ATTACK in (tmp_path / "r" / "results.csv").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["demo_corpus", "pii_corpus_300"])
def test_default_attacks_beat_chance(corpus, request):
    """The default token attacker (AUDIT_SETTINGS; 150 attacker records, 150 targets, seed 0)
    and the default linkage attack beat their blind baselines on unprotected MiniLM
    embeddings: 95% interval of the difference above 0."""
    c = request.getfixturevalue(corpus)
    tok = token_attack(c.X, c.texts, c.sensitive, seed=0)
    assert tok.attack_kwargs == {"hidden": [256], "epochs": 40, "lr": 3e-3, "top_k": 10}
    _, check = tok.check(_plain(c.X))
    assert check.passed, check.text()
    assert check.value > check.chance
    _, check = Linkage().check(_plain(c.X))
    assert check.passed and check.value == 1.0, check.text()


def test_token_leakage_defaults_are_the_audit_settings():
    tok = TokenLeakage(texts=["a b", "c d"], aux_texts=["a b", "c"], aux_embeddings=np.eye(2))
    from privembed.attacks.token_inference import AUDIT_SETTINGS

    assert tok.attack_kwargs == {
        k: list(v) if isinstance(v, tuple) else v for k, v in AUDIT_SETTINGS.items()
    }
