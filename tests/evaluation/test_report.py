"""The report: recommendation logic by hand (utility floor and attack ceiling), attack-strength
labels, self-containment, files written."""

from __future__ import annotations

import re

import numpy as np
import pytest

from privembed.evaluation import Column, SweepConfig, SweepResult, grid, run_sweep, write_report
from privembed.evaluation.report import Floor, parse_floors, recommend


def _result(means: dict[str, dict[str, float]], privacy: bool = True) -> SweepResult:
    """A SweepResult with given per-configuration means (two identical runs each)."""
    configs = [
        SweepConfig(*lab.split(":")[:1], {"epsilon": float(lab.split(":")[1])}) for lab in means
    ]
    records = []
    for c, lab in zip(configs, means, strict=True):
        for run in range(2):
            records.append(
                {
                    "key": c.key,
                    "label": c.label,
                    "run": run,
                    "config": c.to_dict(),
                    "guarantee": c.build().guarantee.to_dict(),
                    "metrics": dict(means[lab]),
                    "seconds": 0.0,
                }
            )
    cols = {"knn_overlap@10": Column("10-NN overlap", "utility", True)}
    if privacy:
        cols["leakage"] = Column("leakage")
    return SweepResult(configs, records, {"knn_overlap@10": 1.0}, cols, {"runs": 2, "seed": 0})


def test_pareto_by_hand():
    res = _result(
        {
            # dominated by purkayastha:5 (another family: epsilons are not compared)
            "laplace:10": {"knn_overlap@10": 0.91, "leakage": 0.30},
            "laplace:20": {"knn_overlap@10": 0.99, "leakage": 0.30},
            "purkayastha:5": {"knn_overlap@10": 0.92, "leakage": 0.10},  # best leakage
            "purkayastha:50": {"knn_overlap@10": 1.00, "leakage": 0.50},  # best utility
            "laplace:1": {"knn_overlap@10": 0.50, "leakage": 0.01},  # misses the floor
        }
    )
    rec = recommend(res, [Floor("knn_overlap@10", ">=", 0.9)])
    assert not rec.ceilings  # no linkage or token columns: no default ceiling
    assert [c.label for c in rec.feasible] == [
        "laplace(epsilon=10)",
        "laplace(epsilon=20)",
        "purkayastha(epsilon=5)",
        "purkayastha(epsilon=50)",
    ]
    assert [c.label for c in rec.pareto] == [
        "laplace(epsilon=20)",
        "purkayastha(epsilon=5)",
        "purkayastha(epsilon=50)",
    ]
    assert rec.utility_axes == ["knn_overlap@10"] and rec.privacy_axes == ["leakage"]


def test_equal_numbers_in_one_family_prefer_the_smaller_epsilon():
    res = _result(
        {
            "laplace:10": {"knn_overlap@10": 1.0, "leakage": 0.2},
            "laplace:50": {"knn_overlap@10": 1.0, "leakage": 0.2},
            "purkayastha:50": {"knn_overlap@10": 1.0, "leakage": 0.2},  # other family: kept
        }
    )
    assert [c.label for c in recommend(res).pareto] == [
        "laplace(epsilon=10)",
        "purkayastha(epsilon=50)",
    ]


def test_without_attacks_the_smallest_feasible_epsilon_per_family():
    res = _result(
        {
            "laplace:5": {"knn_overlap@10": 0.5},
            "laplace:10": {"knn_overlap@10": 0.95},
            "laplace:20": {"knn_overlap@10": 0.99},
            "purkayastha:50": {"knn_overlap@10": 0.97},
        },
        privacy=False,
    )
    rec = recommend(res, [Floor("knn_overlap@10", ">=", 0.9)])
    assert [c.label for c in rec.pareto] == ["laplace(epsilon=10)", "purkayastha(epsilon=50)"]
    assert "not comparable" in rec.note and "no attack was run" in rec.note


def test_floors():
    assert parse_floors(["sts_pearson>=0.7", "leakage<=0.2"]) == [
        Floor("sts_pearson", ">=", 0.7),
        Floor("leakage", "<=", 0.2),
    ]
    with pytest.raises(ValueError, match="must look like"):
        parse_floors(["top1 > 0.9"])
    res = _result({"laplace:10": {"knn_overlap@10": 0.9, "leakage": 0.3}})
    with pytest.raises(ValueError, match="no such column"):
        recommend(res, [Floor("ndcg@10", ">=", 0.5)])
    with pytest.raises(ValueError, match="as a ceiling"):
        recommend(res, [Floor("leakage", ">=", 0.1)])


@pytest.mark.slow
def test_report_is_self_contained_and_shows_guarantees(tmp_path):
    X = np.random.default_rng(0).standard_normal((150, 16))
    configs = grid(
        ["gaussian", "laplace", "empirical"],
        epsilon=[5, 50],
        sigma=[0.2],
        params={"gaussian": {"calibration": ["analytic", "classic"]}},
    )
    res = run_sweep(X, configs, runs=2)
    page = write_report(res, tmp_path, floors=[Floor("knn_overlap@10", ">=", 0.9)])
    assert (tmp_path / "frontier.png").exists()
    html = page.read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", html)
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs)
    # utility, frontier, and one panel per mechanism variant (gaussian analytic and classic,
    # laplace, empirical)
    assert html.count("<img") == len(refs) == 6
    for c in res.configs:  # every configuration's guarantee, written out, beside its numbers
        assert res.guarantee(c).describe().replace("&", "&amp;") in html
    # the classic calibration at epsilon = 50 under-noises: the page says the true delta
    classic = next(c for c in res.configs if "classic" in c.label and "epsilon=50" in c.label)
    assert "exact delta at epsilon=50 is 0.5" in res.guarantee(classic).describe()
    assert "exact delta at epsilon=50 is 0.5" in html
    for stem in ("utility_vs_epsilon", "frontier", "mechanism_laplace"):
        assert (tmp_path / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"{stem}.svg").read_text().lstrip().startswith("<?xml")
    assert "No attack was run" in html


# ---- two sides: utility floor and attack ceiling ------------------------------------------------

from privembed.evaluation import WEAK_ATTACK, StrengthCheck  # noqa: E402


def _attacked(means, *, token_strong=True, chance=0.01):
    """A result with linkage and token columns, both attacks checked on unprotected data."""
    res = _result(means)
    res.columns.update(
        {
            "reid@1": Column("linkage"),
            "reid_chance@1": Column("chance", "reference"),
            "leakage_excess_low": Column("excess", "reference"),
        }
    )
    for r in res.records:
        r["metrics"].setdefault("reid_chance@1", chance)
    res.baseline.update({"reid@1": 1.0, "reid_chance@1": chance, "leakage": 0.2})
    res.checks = {
        "linkage": StrengthCheck(
            "linkage", "reid@1", 1.0, chance, 0.95, 0.99, "", ("reid@1", "reid_chance@1")
        ),
        "token_inference": StrengthCheck(
            "token_inference",
            "leakage",
            0.2 if token_strong else 0.05,
            0.06,
            0.1 if token_strong else -0.03,
            0.18 if token_strong else 0.01,
            "",
            ("leakage", "leakage_excess_low"),
        ),
    }
    return res


def test_text_baselines_are_shown_as_a_table(tmp_path):
    """A report with text-level baselines rendered (the template read the dict's ``keys``
    method instead of its column names, and every such report failed with a TypeError)."""
    X = np.random.default_rng(0).standard_normal((60, 8))
    res = run_sweep(X, grid(["laplace"], epsilon=[50]), runs=1)
    rows = [
        {"method": "word-level dx", "epsilon": 10.0, "token_leakage": 0.25},
        {"method": "redaction", "epsilon": None, "note": "names removed"},
    ]
    html = write_report(res, tmp_path, text_baselines=rows).read_text(encoding="utf-8")
    assert "Text-level baselines" in html
    for cell in ("method", "token_leakage", "note", "word-level dx", "redaction", "names removed"):
        assert f">{cell}<" in html, cell
    assert html.count("<td") >= 8  # two rows of four columns (a missing value shown as a dash)


def test_recommendation_never_exceeds_the_attack_ceiling():
    """Default ceilings: reid@1 <= 5 x chance (0.05 here) and leakage_excess_low <= 0."""
    res = _attacked(
        {
            # best utility and best leakage, but linkable: over the reid ceiling
            "laplace:50": {"knn_overlap@10": 0.95, "leakage": 0.01, "reid@1": 0.90,
                           "leakage_excess_low": -0.01},
            # useful and unlinkable, but the token attacker beats the blind one
            "purkayastha:50": {"knn_overlap@10": 0.90, "leakage": 0.15, "reid@1": 0.02,
                               "leakage_excess_low": 0.05},
            # meets both
            "laplace:20": {"knn_overlap@10": 0.60, "leakage": 0.08, "reid@1": 0.04,
                           "leakage_excess_low": -0.02},
            "laplace:5": {"knn_overlap@10": 0.20, "leakage": 0.07, "reid@1": 0.01,
                          "leakage_excess_low": -0.03},
        }
    )  # fmt: skip
    rec = recommend(res, [Floor("knn_overlap@10", ">=", 0.5)])
    assert [f.metric for f in rec.ceilings] == ["reid@1", "leakage_excess_low"]
    assert rec.ceilings[0].value == pytest.approx(0.05)
    assert [c.label for c in rec.pareto] == ["laplace(epsilon=20)"]
    for c in rec.feasible:  # by construction and checked here: nothing over a ceiling
        for f in rec.ceilings:
            assert res.stats(c, f.metric)[0] <= f.value
    assert rec.sentence(res).startswith("Recommended for the utility floor knn_overlap@10 ≥ 0.5")


def test_none_meets_both_says_so_and_names_the_nearest_point_on_each_side(tmp_path):
    res = _attacked(
        {
            "laplace:50": {"knn_overlap@10": 0.95, "leakage": 0.3, "reid@1": 0.9,
                           "leakage_excess_low": 0.1},
            "laplace:20": {"knn_overlap@10": 0.70, "leakage": 0.2, "reid@1": 0.3,
                           "leakage_excess_low": 0.05},
            "laplace:5": {"knn_overlap@10": 0.30, "leakage": 0.06, "reid@1": 0.03,
                          "leakage_excess_low": -0.01},
            "laplace:1": {"knn_overlap@10": 0.05, "leakage": 0.05, "reid@1": 0.01,
                          "leakage_excess_low": -0.02},
        }
    )  # fmt: skip
    rec = recommend(res, [Floor("knn_overlap@10", ">=", 0.5)])
    assert rec.feasible == [] and rec.pareto == []
    sentence = rec.sentence(res)
    assert sentence.startswith("No configuration meets both the utility floor knn_overlap@10 ≥ 0.5")
    assert "the attack ceiling reid@1 ≤ 0.05 (5 × chance 0.01)" in sentence
    # nearest on the utility side: of those meeting the floor, the smallest ceiling shortfall
    assert rec.nearest_utility.label == "laplace(epsilon=20)"
    # nearest on the attack side: of those meeting the ceilings, the smallest floor shortfall
    assert rec.nearest_attack.label == "laplace(epsilon=5)"
    lines = rec.nearest_lines(res)
    assert lines[0].startswith("nearest meeting the utility floor: laplace(epsilon=20)")
    assert "reid@1 0.300 (misses ≤ 0.05)" in lines[0]
    html = write_report(res, tmp_path, floors=[Floor("knn_overlap@10", ">=", 0.5)]).read_text()
    assert "No configuration meets both the utility floor" in html
    assert "nearest meeting the attack ceiling: laplace(epsilon=5)" in html


def test_a_weak_attack_is_labelled_sets_no_ceiling_and_is_not_plotted(tmp_path):
    from privembed.evaluation.report import frontier_axes

    means = {
        "laplace:50": {"knn_overlap@10": 0.95, "leakage": 0.01, "reid@1": 0.9,
                       "leakage_excess_low": -0.05},
        "laplace:5": {"knn_overlap@10": 0.30, "leakage": 0.01, "reid@1": 0.02,
                      "leakage_excess_low": -0.05},
    }  # fmt: skip
    res = _attacked(means, token_strong=False)
    assert res.attack_status("leakage") == WEAK_ATTACK
    assert res.attack_status("reid@1") == "ok" and res.attack_status("knn_overlap@10") == ""
    assert "leakage" not in res.evidence_columns() and "reid@1" in res.evidence_columns()
    rec = recommend(res, [Floor("knn_overlap@10", ">=", 0.5)])
    assert [f.metric for f in rec.ceilings] == ["reid@1"]  # no token ceiling from a weak attack
    assert rec.privacy_axes == ["reid@1"]
    assert any("token_inference" in s and WEAK_ATTACK in s for s in rec.ignored)
    # the frontier's leakage axis is never the weak attack's column
    assert frontier_axes(res, rec) == ("knn_overlap@10", "reid@1")
    with pytest.raises(ValueError, match="too weak"):
        frontier_axes(res, rec, privacy_metric="leakage")
    # results.csv carries the label on every row of the weak attack's columns
    rows = {(r["label"], r["metric"]): r for r in res.summary()}
    assert rows[("laplace(epsilon=5)", "leakage")]["attack_status"] == WEAK_ATTACK
    assert rows[("laplace(epsilon=5)", "reid@1")]["attack_status"] == "ok"
    assert rows[("laplace(epsilon=5)", "knn_overlap@10")]["attack_status"] == ""
    html = write_report(res, tmp_path).read_text()
    assert WEAK_ATTACK in html
    # every attack weak: nothing is plotted as leakage
    res.checks["linkage"] = StrengthCheck("linkage", "reid@1", 0.01, 0.01, -0.01, 0.02, "",
                                          ("reid@1", "reid_chance@1"))  # fmt: skip
    rec = recommend(res, [Floor("knn_overlap@10", ">=", 0.5)])
    assert rec.ceilings == [] and rec.privacy_axes == []
    assert frontier_axes(res, rec)[1] is None
    assert "every attack was too weak" in rec.note


def test_a_floor_on_the_reidentification_rate_is_refused():
    res = _result({"laplace:10": {"knn_overlap@10": 0.9, "leakage": 0.3}})
    res.columns["top1_originals"] = Column("top-1", "utility", True)
    for r in res.records:
        r["metrics"]["top1_originals"] = 1.0
    with pytest.raises(ValueError, match=r"re-identification rate .* knn_overlap@10"):
        recommend(res, [Floor("top1_originals", ">=", 0.9)])
    # and it is never chosen as the utility axis
    assert recommend(res).utility_axes == ["knn_overlap@10"]


# ---- what a reader sees (issue 40.6) -----------------------------------------------------------


def test_close_swept_values_share_no_tick_label() -> None:
    """Laplace at 380 and Gaussian at 383.4 on one axis printed "38380"; labels are thinned to
    at most MAX_X_TICKS per axis, each at least 1/MAX_X_TICKS of the decades from the last."""
    import itertools
    import math

    from privembed.evaluation.report import MAX_X_TICKS, thin_log_ticks

    vals = [1.0, 3.16, 10, 31.6, 100, 316, 380, 383.4, 1000, 3162, 10000, 31623, 100000]
    kept = thin_log_ticks(vals)
    assert 380.0 not in kept or 383.4 not in kept
    assert len(kept) <= MAX_X_TICKS + 1 and kept[0] == 1.0
    gaps = [math.log10(b) - math.log10(a) for a, b in itertools.pairwise(kept)]
    assert min(gaps) >= (5.0 / MAX_X_TICKS) - 1e-12


def test_coinciding_families_stay_visible_and_the_legend_names_only_what_is_drawn(tmp_path):
    """Laplace and Mahalanobis with an identity covariance give the same curve: each family has
    its own marker and line style (hollow every other), drawn in order; and the frontier's legend
    shows "recommended (Pareto)" only when a recommended point is circled."""
    import matplotlib

    matplotlib.use("Agg")
    from privembed.evaluation.report import family_styles, plot_frontier

    res = _result(
        {"laplace:10": {"knn_overlap@10": 0.5, "leakage": 0.2},
         "mahalanobis:10": {"knn_overlap@10": 0.5, "leakage": 0.2},
         "purkayastha:10": {"knn_overlap@10": 0.5, "leakage": 0.2}},
    )  # fmt: skip
    styles = family_styles(res)
    shapes = {(s["marker"], s["ls"], s["mfc"] == "none") for s in styles.values()}
    assert len(shapes) == len(styles) == 3
    assert len({s["zorder"] for s in styles.values()}) == 3
    feasible = recommend(res, [Floor("knn_overlap@10", ">=", 0.4)])
    infeasible = recommend(res, [Floor("knn_overlap@10", ">=", 0.9)])
    assert feasible.pareto and not infeasible.pareto
    for rec, shown in ((feasible, True), (infeasible, False)):
        plot_frontier(res, rec, tmp_path, utility="knn_overlap@10", privacy="leakage")
        svg = (tmp_path / "frontier.svg").read_text()
        assert ("recommended (Pareto)" in svg) == shown
