"""The report: recommendation logic by hand, self-containment, files written."""

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
    cols = {"top1_originals": Column("top-1", "utility", True)}
    if privacy:
        cols["leakage"] = Column("leakage")
    return SweepResult(configs, records, {"top1_originals": 1.0}, cols, {"runs": 2, "seed": 0})


def test_pareto_by_hand():
    res = _result(
        {
            # dominated by purkayastha:5 (another family: epsilons are not compared)
            "laplace:10": {"top1_originals": 0.91, "leakage": 0.30},
            "laplace:20": {"top1_originals": 0.99, "leakage": 0.30},
            "purkayastha:5": {"top1_originals": 0.92, "leakage": 0.10},  # best leakage
            "purkayastha:50": {"top1_originals": 1.00, "leakage": 0.50},  # best utility
            "laplace:1": {"top1_originals": 0.50, "leakage": 0.01},  # misses the floor
        }
    )
    rec = recommend(res, [Floor("top1_originals", ">=", 0.9)])
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
    assert rec.utility_axes == ["top1_originals"] and rec.privacy_axes == ["leakage"]


def test_equal_numbers_in_one_family_prefer_the_smaller_epsilon():
    res = _result(
        {
            "laplace:10": {"top1_originals": 1.0, "leakage": 0.2},
            "laplace:50": {"top1_originals": 1.0, "leakage": 0.2},
            "purkayastha:50": {"top1_originals": 1.0, "leakage": 0.2},  # other family: kept
        }
    )
    assert [c.label for c in recommend(res).pareto] == [
        "laplace(epsilon=10)",
        "purkayastha(epsilon=50)",
    ]


def test_without_attacks_the_smallest_feasible_epsilon_per_family():
    res = _result(
        {
            "laplace:5": {"top1_originals": 0.5},
            "laplace:10": {"top1_originals": 0.95},
            "laplace:20": {"top1_originals": 0.99},
            "purkayastha:50": {"top1_originals": 0.97},
        },
        privacy=False,
    )
    rec = recommend(res, [Floor("top1_originals", ">=", 0.9)])
    assert [c.label for c in rec.pareto] == ["laplace(epsilon=10)", "purkayastha(epsilon=50)"]
    assert "not comparable" in rec.note


def test_floors():
    assert parse_floors(["sts_pearson>=0.7", "leakage<=0.2"]) == [
        Floor("sts_pearson", ">=", 0.7),
        Floor("leakage", "<=", 0.2),
    ]
    with pytest.raises(ValueError, match="must look like"):
        parse_floors(["top1 > 0.9"])
    res = _result({"laplace:10": {"top1_originals": 0.9, "leakage": 0.3}})
    with pytest.raises(ValueError, match="no such column"):
        recommend(res, [Floor("ndcg@10", ">=", 0.5)])


@pytest.mark.slow
def test_report_is_self_contained_and_shows_guarantees(tmp_path):
    X = np.random.default_rng(0).standard_normal((150, 16))
    res = run_sweep(
        X, grid(["gaussian", "laplace", "empirical"], epsilon=[5, 50], sigma=[0.2]), runs=2
    )
    page = write_report(res, tmp_path, floors=[Floor("top1_originals", ">=", 0.9)])
    html = page.read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", html)
    assert refs and all(r.startswith("data:image/png;base64,") for r in refs)
    assert html.count("<img") == len(refs) == 5  # utility, frontier, 3 mechanisms
    for c in res.configs:  # every configuration's guarantee, written out, beside its numbers
        assert res.guarantee(c).describe().replace("&", "&amp;") in html
    assert "exact delta" not in html or "classic" in html
    for stem in ("utility_vs_epsilon", "frontier", "mechanism_laplace"):
        assert (tmp_path / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / f"{stem}.svg").read_text().lstrip().startswith("<?xml")
    assert "No attack was run" in html
