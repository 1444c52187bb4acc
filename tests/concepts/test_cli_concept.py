"""``privembed concept learn/show/combine`` on tiny data, and ``protect --mask profile``.

A toy embedder replaces the sentence-transformers model so the commands run in seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch  # noqa: F401 - a dev dependency: a broken install fails, never skips
from typer.testing import CliRunner

from privembed.cli import app
from privembed.concepts import ConceptProfile
from privembed.data.io import read_embeddings, write_embeddings

from .test_profile import CountingEmbedder

runner = CliRunner()


@pytest.fixture
def toy_model(monkeypatch, tmp_path):
    import privembed.data.embedders

    monkeypatch.setattr(
        privembed.data.embedders, "Embedder", lambda model=None: CountingEmbedder(16)
    )
    monkeypatch.setenv("PRIVEMBED_CACHE_DIR", str(tmp_path / "cache"))


def _corpus(tmp_path):
    p = tmp_path / "corpus.jsonl"
    lines = [
        {"id": i, "text": f"visit {i}: the patient reports {w} again"}
        for i, w in enumerate(["flu", "gout", "asthma", "nothing new"] * 10)
    ]
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("flu\ngout\nasthma\n")
    return p, tokens


def _assert_user_error(result, pattern):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert pattern in err, err


def test_learn_show_combine_and_protect(tmp_path, toy_model):
    corpus, tokens = _corpus(tmp_path)
    out = tmp_path / "disease.profile"
    args = ["concept", "learn", str(corpus), "--concept", "illness", "--tokens", str(tokens)]
    args += ["-o", str(out), "--epochs", "3", "--lr", "0.01"]
    r = runner.invoke(app, [*args, "--lambda", "0.01", "--seed", "1", "--force"])
    assert r.exit_code == 0, r.output
    assert "built 30 pairs from 40 texts (10 without a concept token" in r.stderr
    assert "so no gate can close" in " ".join(r.stderr.split())  # 3 steps x lr 0.01
    assert "mask is uninformative" in " ".join(r.stderr.split())  # --force: written, warned
    prof = ConceptProfile.load(out)
    assert prof.dim == 16 and prof.concept_names == ["illness"]
    assert prof.metadata["training"]["lam"] == 0.01 and prof.metadata["seed"] == 1
    assert prof.metadata["texts_source"] == "corpus.jsonl"

    r = runner.invoke(app, ["concept", "show", str(out), "--json", "--top", "3"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["dim"] == 16 and len(shown["top_dimensions"]) == 3
    assert shown["n_pairs"] == 30 and shown["sparsity"] == pytest.approx(prof.sparsity)
    assert [d for d, _ in shown["top_dimensions"]] == [d for d, _ in prof.top_dimensions(3)]
    r = runner.invoke(app, ["concept", "show", str(out)])
    assert r.exit_code == 0 and "val_accuracy_masked" in r.stdout

    # a built-in concept with generated sentences
    city = tmp_path / "city.profile"
    r = runner.invoke(
        app,
        [
            "concept",
            "learn",
            "-c",
            "location",
            "-o",
            str(city),
            "--n",
            "40",
            "--epochs",
            "2",
            "--seed",
            "0",
            "--force",
        ],
    )
    assert r.exit_code == 0, r.output
    both = tmp_path / "both.profile"
    r = runner.invoke(app, ["concept", "combine", str(out), str(city), "-o", str(both)])
    assert r.exit_code == 0, r.output
    assert ConceptProfile.load(both).concept_names == ["illness", "city"]
    before = both.read_bytes()
    r = runner.invoke(app, ["concept", "combine", str(city), "-o", str(both)])
    _assert_user_error(r, "pass --overwrite")
    assert both.read_bytes() == before
    r = runner.invoke(app, ["concept", "learn", "-c", "location", "-o", str(both), "--n", "40"])
    _assert_user_error(r, "pass --overwrite")  # refused before any training
    assert both.read_bytes() == before

    # privembed protect --mechanism mahalanobis --mask <profile>
    X = np.random.default_rng(0).standard_normal((12, 16)).astype(np.float32)
    src, dst = tmp_path / "e.npz", tmp_path / "p.npz"
    write_embeddings(src, X, metadata={"embedding_model": "toy-16"})
    r = runner.invoke(
        app,
        [
            "protect",
            str(src),
            "-o",
            str(dst),
            "-m",
            "mahalanobis",
            "--epsilon",
            "10",
            "--mask",
            str(both),
            "--seed",
            "0",
        ],
    )
    assert r.exit_code == 0, r.output
    t = read_embeddings(dst)
    assert t.X.shape == X.shape and t.metadata["mechanism"]["mechanism"] == "mahalanobis"
    # the release records the configuration it used: the combined profile's mask
    np.testing.assert_allclose(t.metadata["mechanism"]["mask"], ConceptProfile.load(both).mask)


def test_user_errors(tmp_path, toy_model):
    corpus, tokens = _corpus(tmp_path)
    r = runner.invoke(
        app, ["concept", "learn", "-c", "employer", "-o", str(tmp_path / "x.profile")]
    )
    _assert_user_error(r, "is not built in; give its tokens")
    r = runner.invoke(
        app,
        [
            "concept",
            "learn",
            "-c",
            "employer",
            "--tokens",
            str(tokens),
            "-o",
            str(tmp_path / "x.p"),
        ],
    )
    _assert_user_error(r, "give a corpus of texts (INPUT)")
    r = runner.invoke(
        app,
        [
            "concept",
            "learn",
            "-c",
            "x",
            "--tokens",
            str(tokens),
            "--texts",
            str(corpus),
            "-o",
            "o.p",
            "--lambda",
            "-1",
        ],
    )
    _assert_user_error(r, "lam must be >= 0, got lam=-1.")
    r = runner.invoke(
        app,
        ["concept", "learn", "-c", "x", "--tokens", str(tmp_path / "none.txt"), "-o", "o.p"],
    )
    _assert_user_error(r, "file not found")
    r = runner.invoke(app, ["concept", "show", str(tmp_path / "missing.profile")])
    _assert_user_error(r, "profile not found")
    assert not (tmp_path / "x.profile").exists()


def test_learn_fails_loudly_on_an_uninformative_mask(tmp_path, toy_model):
    """3 epochs at lr 1e-4 cannot move any gate from 0.5: exit 2, the numbers, what to try,
    and no profile written."""
    corpus, tokens = _corpus(tmp_path)
    out = tmp_path / "flat.profile"
    args = ["concept", "learn", "--concept", "illness", "--tokens", str(tokens)]
    args += ["--texts", str(corpus), "-o", str(out), "--epochs", "3", "--seed", "1"]  # old spelling
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split("error: ", 1)[1].split())  # the one-line error
    assert err.startswith("the learned mask is uninformative: its values span 0.")
    for what in ("spread 0.0", "< 0.1", "of 16 gates closed", "30 pairs", "3 epochs at lr 0.0001",
                 "--lr 1e-2", "--epochs", "--force"):  # fmt: skip
        assert what in err, what
    assert not out.exists()


def test_learn_eraser_on_real_text_reports_held_out_aucs_and_warns(tmp_path, toy_model):
    """``concept learn --eraser`` fits the eraser on real text (INPUT, labelled by whether the
    concept occurs; or --eraser-texts with labels) and prints a held-out probe's ROC AUC before
    and after, linear and non-linear, with a warning when the concept stays readable; without
    real text it says the eraser was fitted on generated sentences."""
    from privembed.concepts.erasure import ConceptEraser, eraser_path

    corpus, tokens = _corpus(tmp_path)
    out = tmp_path / "real.profile"
    args = ["concept", "learn", str(corpus), "--concept", "illness", "--tokens", str(tokens)]
    r = runner.invoke(app, [*args, "-o", str(out), "--epochs", "2", "--force", "--eraser",
                            "--seed", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    err = " ".join(r.stderr.split())
    assert "held-out probe ROC AUC before -> after erasure: linear" in err and "MLP" in err
    meta = ConceptEraser.load(eraser_path(out)).metadata
    assert meta["fitted_on"] == "real texts (corpus.jsonl; labelled by the concept's occurrence)"
    assert set(meta["check"]) >= {"linear_before", "linear_after", "mlp_before", "mlp_after"}

    labelled = tmp_path / "labelled.jsonl"
    rows = [{"text": f"definition {i} of a {w}", "label": int(w != "stone")}
            for i, w in enumerate(["fever", "stone", "cough", "stone"] * 15)]  # fmt: skip
    labelled.write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    out2 = tmp_path / "labelled.profile"
    r = runner.invoke(app, [*args, "-o", str(out2), "--epochs", "2", "--force", "--eraser",
                            "--eraser-texts", str(labelled), "--seed", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    meta = ConceptEraser.load(eraser_path(out2)).metadata
    assert meta["fitted_on"] == "real texts (labelled.jsonl; labels given)"

    gen = tmp_path / "gen.profile"
    r = runner.invoke(app, ["concept", "learn", "-c", "disease", "-o", str(gen), "--n", "60",
                            "--epochs", "2", "--force", "--eraser", "--seed", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    err = " ".join(r.stderr.split())
    assert "fitted on generated sentences; on real text it may erase nothing" in err
    assert (
        ConceptEraser.load(eraser_path(gen))
        .metadata["fitted_on"]
        .startswith("generated sentences (D+/D- pairs")
    )
    r = runner.invoke(app, ["concept", "learn", "-c", "disease", "-o", str(tmp_path / "x.p"),
                            "--eraser-texts", str(labelled)])  # fmt: skip
    _assert_user_error(r, "--eraser-texts is the data of the eraser: give --eraser too.")
