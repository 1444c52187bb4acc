"""Sweeps: grid, independent reproducible streams, tidy tables, resuming after an interruption."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privembed import DataError
from privembed.evaluation import SweepConfig, SweepResult, UtilityEvaluator, grid, run_sweep
from privembed.evaluation.sweep import cell_streams

X = np.random.default_rng(7).standard_normal((120, 16)).astype(np.float32)
CONFIGS = grid(["laplace", "gaussian", "empirical"], epsilon=[10, 40], sigma=[0.2])


def _ev():
    return UtilityEvaluator(X, n_queries=None, ks=(1, 5), neighbours=5)


class Counting:
    """A privacy metric that counts its calls and can interrupt the sweep."""

    name = "counting"

    def __init__(self, stop_after=None):
        self.calls = 0
        self.stop_after = stop_after

    def __call__(self, release):
        self.calls += 1
        if self.stop_after is not None and self.calls > self.stop_after:
            raise KeyboardInterrupt
        return {"norm_mean": float(np.linalg.norm(release.Y, axis=1).mean())}


def test_grid_and_config_identity():
    labels = [c.label for c in CONFIGS]
    assert labels == [
        "laplace(epsilon=10)",
        "laplace(epsilon=40)",
        "gaussian(delta=1e-05, epsilon=10)",
        "gaussian(delta=1e-05, epsilon=40)",
        "empirical(sigma=0.2)",
    ]
    assert (
        SweepConfig("laplace", {"epsilon": 10}).key == SweepConfig("laplace", {"epsilon": 10.0}).key
    )
    with pytest.raises(ValueError, match="needs its output dimension"):
        grid(["projection"])
    with pytest.raises(ValueError, match="mechanism must be one of"):
        grid(["laplas"])
    with pytest.raises(TypeError, match="JSON-safe"):
        SweepConfig("laplace", {"epsilon": object()})


def test_streams_are_independent_and_order_free():
    a1, _ = cell_streams(0, CONFIGS[0], 0, 5)
    a2, _ = cell_streams(0, CONFIGS[0], 0, 5)
    b, _ = cell_streams(0, CONFIGS[0], 1, 5)
    c, _ = cell_streams(0, CONFIGS[1], 0, 5)
    x1, x2, y, z = (g.standard_normal(4) for g in (a1, a2, b, c))
    np.testing.assert_array_equal(x1, x2)
    assert not np.allclose(x1, y) and not np.allclose(x1, z)
    # the grid order does not change any cell's numbers
    fwd = run_sweep(X, CONFIGS[:2], runs=2, seed=3, utility=_ev())
    rev = run_sweep(X, CONFIGS[:2][::-1], runs=2, seed=3, utility=_ev())
    key = lambda r: (r["key"], r["run"])  # noqa: E731
    assert sorted((key(r), r["metrics"]) for r in fwd.records) == sorted(
        (key(r), r["metrics"]) for r in rev.records
    )
    # runs differ from each other
    m = [r["metrics"]["mean_cosine"] for r in fwd.records if r["key"] == CONFIGS[0].key]
    assert m[0] != m[1]


def test_tidy_summary_mean_and_std():
    res = run_sweep(X, CONFIGS, runs=3, seed=1, utility=_ev(), privacy=[Counting()])
    rows = res.summary()
    assert len(rows) == len(CONFIGS) * len(res.metric_names())
    for cfg in CONFIGS:
        vals = [r["metrics"]["top1_originals"] for r in res.records if r["key"] == cfg.key]
        row = next(r for r in rows if r["config_id"] == cfg.key and r["metric"] == "top1_originals")
        assert row["mean"] == pytest.approx(np.mean(vals))
        assert row["std"] == pytest.approx(np.std(vals, ddof=1))
        assert row["n_runs"] == 3
        assert row["guarantee"] == cfg.build().guarantee.short()
        assert row["guarantee_detail"] == cfg.build().guarantee.describe()
    assert {r["kind"] for r in rows} == {"utility", "privacy"}


def test_resume_after_interruption_gives_the_uninterrupted_numbers(tmp_path):
    full = run_sweep(X, CONFIGS, runs=2, seed=5, utility=_ev(), privacy=[Counting()])
    path = tmp_path / "runs.jsonl"
    # call 1 is the unprotected baseline, calls 2-4 are three cells
    with pytest.raises(KeyboardInterrupt):
        run_sweep(
            X, CONFIGS, runs=2, seed=5, utility=_ev(), privacy=[Counting(stop_after=4)],
            results=path,
        )  # fmt: skip
    lines = path.read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["header", "baseline", "cell", "cell", "cell"]
    with path.open("a") as fh:  # a write torn by the interruption
        fh.write('{"type": "cell", "key": "abc", "ru')
    again = Counting()
    progress = []
    resumed = run_sweep(
        X, CONFIGS, runs=2, seed=5, utility=_ev(), privacy=[again], results=path,
        on_progress=lambda done, total: progress.append((done, total)),
    )  # fmt: skip
    assert again.calls == 2 * len(CONFIGS) - 3  # only the missing cells were computed
    assert progress[-1] == (10, 10) and len(progress) == 10
    assert [r["metrics"] for r in resumed.records] == [r["metrics"] for r in full.records]
    assert [r["mean"] for r in resumed.summary()] == [r["mean"] for r in full.summary()]
    # a third run computes nothing
    third = Counting()
    run_sweep(X, CONFIGS, runs=2, seed=5, utility=_ev(), privacy=[third], results=path)
    assert third.calls == 0
    assert len(path.read_text().splitlines()) == 2 + 2 * len(CONFIGS)


def test_results_file_of_another_sweep_is_refused(tmp_path):
    path = tmp_path / "runs.jsonl"
    run_sweep(X, CONFIGS[:1], runs=1, seed=5, utility=_ev(), results=path)
    with pytest.raises(DataError, match=r"different sweep \(differs in: seed\)"):
        run_sweep(X, CONFIGS[:1], runs=1, seed=6, utility=_ev(), results=path)
    with pytest.raises(DataError, match="data_sha256"):
        run_sweep(X + 1, CONFIGS[:1], runs=1, seed=5, utility=UtilityEvaluator(X + 1), results=path)
    counting = Counting()
    run_sweep(X, CONFIGS[:1], runs=1, seed=6, utility=_ev(), results=path, restart=True)
    run_sweep(X, CONFIGS[:1], runs=1, seed=6, utility=_ev(), privacy=[], results=path)
    assert counting.calls == 0


def test_save_and_reload(tmp_path):
    res = run_sweep(X, CONFIGS, runs=2, seed=2, utility=_ev(), description={"source": "test"})
    paths = res.save(tmp_path)
    assert set(paths) == {"results.csv", "runs.csv", "results.json", "results.parquet"}
    import csv

    import pyarrow.parquet as pq

    with paths["results.csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(res.summary())
    assert pq.read_table(paths["results.parquet"]).num_rows == len(rows)
    data = json.loads(paths["results.json"].read_text())
    back = SweepResult.from_json(data)
    for a, b in zip(res.summary(), back.summary(), strict=True):
        assert a["mean"] == pytest.approx(b["mean"])
        assert a["guarantee_detail"] == b["guarantee_detail"]
    assert back.description == {"source": "test"}
    # std of a single run is undefined, stored as null
    one = run_sweep(X, CONFIGS[:1], runs=1, seed=2, utility=_ev())
    assert all(math.isnan(r["std"]) for r in one.summary())
    assert all(r["std"] is None for r in one.to_json()["summary"])


def test_privacy_metrics_also_run_once_on_the_unprotected_embeddings():
    from privembed.evaluation import Linkage
    from privembed.evaluation.privacy import Unprotected

    seen = []

    class Recording(Counting):
        def __call__(self, release):
            seen.append(release.mechanism)
            return super().__call__(release)

    res = run_sweep(
        X, CONFIGS[:2], runs=1, seed=5, utility=_ev(), privacy=[Recording(), Linkage(ks=(1,))]
    )
    assert isinstance(seen[0], Unprotected) and len(seen) == 3  # baseline + two cells
    assert res.baseline["norm_mean"] == pytest.approx(float(np.linalg.norm(X, axis=1).mean()))
    assert res.baseline["reid@1"] == 1.0  # every plain vector links to itself
    rows = [r for r in res.summary() if r["metric"] == "reid@1"]
    assert rows and all(r["baseline"] == 1.0 for r in rows)
    assert Unprotected().guarantee.describe() == "no formal guarantee: unprotected embeddings"
    Y = Unprotected().privatize(X)
    assert Y.dtype == X.dtype and np.array_equal(Y, X) and Y is not X


def test_a_profile_is_identified_by_its_content_not_its_path(tmp_path):
    from privembed.evaluation import SweepResult

    mask = np.zeros(16)
    mask[:4] = 1.0
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, mask)
    np.save(b, mask)
    ca = SweepConfig("mahalanobis", {"epsilon": 10, "profile": str(a)})
    cb = SweepConfig("mahalanobis", {"epsilon": 10, "profile": str(b)})
    assert "profile_sha256" in ca.params and ca.key == cb.key  # same mask, same noise streams
    assert np.array_equal(ca.build().privatize(X, rng=3), cb.build().privatize(X, rng=3))
    res = run_sweep(X, [ca], runs=1, seed=1, utility=_ev())
    again = SweepResult.from_json(json.loads(json.dumps(res.to_json())))
    assert [c.key for c in again.configs] == [ca.key]
    mask[4] = 1.0  # the profile is re-learned at the same path
    np.save(a, mask)
    changed = SweepConfig("mahalanobis", {"epsilon": 10, "profile": str(a)})
    assert changed.key != ca.key  # a resumed sweep will not reuse the old cells
    with pytest.raises(DataError, match=r"^profile .*a\.npy changed since this configuration"):
        ca.build()
    missing = SweepConfig("mahalanobis", {"epsilon": 10, "profile": str(tmp_path / "no.npy")})
    assert "profile_sha256" not in missing.params
