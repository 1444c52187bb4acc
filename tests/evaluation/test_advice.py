"""Advice: the closed-form note on a setting, the theory grid, and ``advise`` (library and CLI)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privembed.core.theory import (
    expected_cosine_gaussian,
    expected_cosine_laplace,
    expected_cosine_purkayastha,
)
from privembed.evaluation import Floor, Linkage
from privembed.evaluation.advice import (
    USEFUL_COSINE,
    VACUOUS_DELTA,
    VACUOUS_LDP_EPSILON,
    advise,
    epsilon_for_cosine,
    setting_note,
    theory_grid,
)
from privembed.evaluation.pipeline import build_configs
from privembed.mechanisms import get_mechanism


def test_setting_note_flags_low_cosine_and_vacuous_guarantees():
    low = setting_note(get_mechanism("gaussian", epsilon=10.0, delta=1e-5), 384)
    assert low.expected_cosine == pytest.approx(
        expected_cosine_gaussian(get_mechanism("gaussian", epsilon=10.0, delta=1e-5).sigma, 384)
    )
    assert low.expected_cosine < USEFUL_COSINE and low.warn
    assert low.notes[0].startswith("expected mean cosine 0.05") and len(low.notes) == 1
    assert low.ldp_epsilon == 10.0 and low.ldp_delta == 1e-5
    # d_X epsilon 1000 implies 2000-LDP on unit vectors: vacuous, although the cosine is fine
    lap = setting_note(get_mechanism("laplace", epsilon=1000.0), 384)
    assert lap.expected_cosine > 0.9 and lap.ldp_epsilon == 2000.0
    assert lap.notes == (lap.notes[0],) and "vacuous" in lap.notes[0]
    assert lap.ldp_epsilon > VACUOUS_LDP_EPSILON
    # the classic sigma at epsilon 50 achieves delta 0.59: vacuous by delta
    classic = setting_note(
        get_mechanism("gaussian", epsilon=5.0, delta=1e-5, calibration="classic"), 384
    )
    assert classic.ldp_delta < VACUOUS_DELTA  # epsilon 5: the classic sigma is still valid-ish
    bad = setting_note(
        get_mechanism("gaussian", epsilon=50.0, delta=1e-5, calibration="classic"), 384
    )
    assert bad.ldp_delta == pytest.approx(0.59, abs=0.01)
    assert [n.split(":")[0] for n in bad.notes[1:]] == ["the guarantee is vacuous in practice"] * 2
    assert "implies 50-LDP" in bad.notes[1] and "delta = 0.586" in bad.notes[2]
    # a setting with neither problem is quiet
    ok = setting_note(get_mechanism("purkayastha", epsilon=3.0), 3)
    assert ok.expected_cosine > USEFUL_COSINE and not ok.warn and ok.notes == ()
    assert ok.lines()[0].startswith("expected mean cosine 0.")
    # no closed form: said so, not a warning
    mah = setting_note(get_mechanism("mahalanobis", epsilon=5.0), 384)
    assert mah.expected_cosine is None and mah.notes[0].startswith("no closed form")
    assert json.loads(json.dumps(mah.to_dict()))["useful_cosine"] == USEFUL_COSINE


@pytest.mark.parametrize(
    "name,law",
    [
        ("laplace", lambda e, d: expected_cosine_laplace(e, d)),
        ("purkayastha", lambda e, d: expected_cosine_purkayastha(e, d)),
        (
            "gaussian",
            lambda e, d: expected_cosine_gaussian(
                get_mechanism("gaussian", epsilon=e, delta=1e-5).sigma, d
            ),
        ),
    ],
)
def test_epsilon_for_cosine_inverts_the_closed_form(name, law):
    for target in (0.1, 0.5, 0.9):
        eps = epsilon_for_cosine(name, target, 384)
        assert law(eps, 384) == pytest.approx(target, abs=2e-4)
        assert law(eps * 0.99, 384) < target  # the smallest such epsilon
    assert epsilon_for_cosine("mahalanobis", 0.5, 384) is None


def test_default_grid_spans_the_transition():
    """Default evaluate grid: expected cosine 0.1 .. 0.9 for the data's dimension."""
    eps = theory_grid("laplace", 384)
    cos = [expected_cosine_laplace(e, 384) for e in eps]
    assert cos == sorted(cos) and abs(cos[0] - 0.1) < 0.02 and abs(cos[-1] - 0.9) < 0.02
    X = np.random.default_rng(0).standard_normal((100, 32))
    cosines = (0.1, 0.5, 0.9)
    configs, notes = build_configs(
        ["gaussian", "mahalanobis", "empirical"], dim=32, X=X, cosines=cosines
    )
    by = {}
    for c in configs:
        by.setdefault(c.mechanism, []).append(c.params.get("epsilon", c.params.get("sigma")))
    assert len(by["gaussian"]) == len(by["mahalanobis"]) == len(by["empirical"]) == 3
    assert any("from theory" in n for n in notes) and any("Sigma = I" in n for n in notes)
    # mahalanobis has no closed form: measured, and (Sigma = I) close to Laplace's theory
    lap = theory_grid("laplace", 32, cosines=cosines)
    for m, t in zip(by["mahalanobis"], lap, strict=True):
        assert 0.5 * t < m < 2 * t


def _clustered(n=150, d=32, seed=0):
    """Records in 15 tight clusters: neighbours (utility) survive noise that hides identity."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((15, d))
    return centres[rng.integers(0, 15, n)] + 0.05 * rng.standard_normal((n, d))


def test_advise_meets_the_target_by_closed_form_and_by_bisection():
    X = _clustered()
    adv = advise(X, target=Floor("mean_cosine", ">=", 0.6), mechanisms=["gaussian"], runs=2)
    (g,) = adv.mechanisms
    assert g.method.startswith("closed form") and g.meets_target
    assert g.measured["mean_cosine"] >= 0.6
    assert adv.ceilings == [] and g.ok  # no attack: no ceiling
    # a metric without a closed form: bisection on measurements
    adv = advise(X, target=Floor("knn_overlap@10", ">=", 0.3), mechanisms=["laplace"], runs=2)
    (lap,) = adv.mechanisms
    assert lap.method.startswith("bisection") and lap.measured["knn_overlap@10"] >= 0.3
    with pytest.raises(ValueError, match="re-identification rate"):
        advise(X, target=Floor("top1_originals", ">=", 0.5))


def test_advise_says_when_no_epsilon_meets_both():
    """Linkage ceiling 5 x chance on 150 records (0.033): at mean cosine 0.5 every record is
    re-identified, so no epsilon meets both; the other side of the frontier is reported."""
    X = np.random.default_rng(1).standard_normal((150, 32))
    adv = advise(
        X, target=Floor("mean_cosine", ">=", 0.5), mechanisms=["laplace"], attacks=[Linkage()],
        runs=1,
    )  # fmt: skip
    (lap,) = adv.mechanisms
    assert [c.attack for c in adv.checks] == ["linkage"] and adv.checks[0].passed
    assert adv.ceilings[0].metric == "reid@1"
    assert adv.ceilings[0].value == pytest.approx(5 / 150)
    assert lap.meets_target and not lap.meets_ceiling and lap.measured["reid@1"] > 0.5
    assert adv.sentence().startswith("No setting meets both mean_cosine ≥ 0.5")
    side = lap.attack_side
    assert side is not None and side["meets_ceiling"] and side["value"] < lap.value
    assert side["measured"]["reid@1"] <= adv.ceilings[0].value
    # a loose ceiling is met
    adv = advise(
        X, target=Floor("mean_cosine", ">=", 0.5), mechanisms=["laplace"], attacks=[Linkage()],
        ceilings=[Floor("reid@1", "<=", 1.0)], runs=1,
    )  # fmt: skip
    assert adv.mechanisms[0].ok and adv.sentence().startswith("Smallest setting meeting")


def _app():
    from privembed._cli.advise import register

    app = typer.Typer()
    register(app)
    app.command(name="noop")(lambda: None)
    return app


def test_advise_command_json(tmp_path):
    from privembed.data.io import write_embeddings

    X = _clustered().astype(np.float32)
    write_embeddings(tmp_path / "e.npz", X)
    r = CliRunner().invoke(
        _app(), ["advise", str(tmp_path / "e.npz"), "--plain-only", "--min-cosine", "0.6", "--runs", "1",
                 "--mechanisms", "gaussian,laplace", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["target"] == {"metric": "mean_cosine", "op": ">=", "value": 0.6}
    assert [m["mechanism"] for m in out["mechanisms"]] == ["gaussian", "laplace"]
    assert out["ceilings"][0]["metric"] == "reid@1" and out["answer"].startswith("No setting")
    for m in out["mechanisms"]:
        assert m["measured"]["mean_cosine"] >= 0.6 and m["meets_target"]
        assert math.isfinite(m["value"]) and m["guarantee"]
    r = CliRunner().invoke(_app(), ["advise", str(tmp_path / "e.npz"), "--min-top1", "0.9"])
    assert r.exit_code != 0


@pytest.mark.slow
def test_advise_gaussian_on_the_demo_data_meets_the_target(demo_corpus):
    """Gaussian on the demo notes (300, MiniLM 384-d): the closed form's epsilon, measured over
    3 releases, has mean cosine >= the target."""
    for target in (0.3, 0.6):
        adv = advise(
            demo_corpus.X, target=Floor("mean_cosine", ">=", target), mechanisms=["gaussian"],
            runs=3,
        )  # fmt: skip
        (g,) = adv.mechanisms
        assert g.value is not None and g.method.startswith("closed form")
        assert g.measured["mean_cosine"] >= target
        # and not wastefully far above it: within 0.02 of the target
        assert g.measured["mean_cosine"] < target + 0.02


def _side_advice(side_meets: bool):
    from privembed.evaluation.advice import Advice, MechanismAdvice

    m = MechanismAdvice(
        "laplace", "epsilon", 300.0, "bisection", guarantee_short="300-d_X(l2)",
        measured={"mean_cosine": 0.52, "reid@1": 0.9}, meets_target=True, meets_ceiling=False,
        failed=["reid@1 ≤ 0.00466"],
        attack_side={"value": 20.0, "guarantee_short": "20-d_X(l2)", "meets_ceiling": side_meets,
                     "measured": {"mean_cosine": 0.03, "reid@1": 0.006 if not side_meets else 0.002}},
    )  # fmt: skip
    return Advice(
        target=Floor("mean_cosine", ">=", 0.5), ceilings=[Floor("reid@1", "<=", 0.00466)],
        checks=[], mechanisms=[m], settings={"runs": 3},
    )  # fmt: skip


def test_plain_only_rows_are_labelled_by_what_was_measured_there():
    """Issue 27.4/28.6: a row read 'largest under the ceiling ... meets: neither' with reid@1
    0.006 > 0.00466."""
    over = "\n".join(_side_advice(False).lines())
    assert "largest under the ceiling" not in over
    assert "under the ceiling on one release, over it on 3" in over and "meets: neither" in over
    under = "\n".join(_side_advice(True).lines())
    assert "largest under the ceiling" in under and "meets: ceiling only" in under
    assert "meets: target only" in under  # the useful point misses the ceiling


def test_advise_plain_only_at_80_columns_splits_no_word(tmp_path):
    from privembed.data.io import write_embeddings

    X = _clustered().astype(np.float32)
    write_embeddings(tmp_path / "e.npz", X)
    r = CliRunner().invoke(
        _app(), ["advise", str(tmp_path / "e.npz"), "--plain-only", "--min-cosine", "0.6",
                 "--runs", "1", "--mechanisms", "laplace,purkayastha"],
        env={"COLUMNS": "80"},
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80
    words = r.stdout.split()
    # the words that a split would cut: the configuration and the guarantee tokens stay whole
    assert any(re.fullmatch(r"\(\d[\d.e+]*-d_X\(l2\)", w) for w in words), words
    assert any(w.startswith("purkayastha") for w in words)
    assert not any(w in ("purkast", "ha", "LD", "P") for w in words), words
