"""The privacy ledger: composition, free keyed re-release, budget refusal, concurrency."""

from __future__ import annotations

import math
import multiprocessing as mp

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import EmpiricalGaussianMechanism, GaussianMechanism, LaplaceMechanism
from privembed.cli import app
from privembed.ledger import BudgetExceeded, Ledger
from privembed.theory import analytic_gaussian_epsilon


def test_basic_composition_for_metric_and_free_keyed_rerelease(tmp_path):
    led = Ledger(tmp_path / "l.db")
    m = LaplaceMechanism(epsilon=3.0)  # 3-d_X(l2) => 6-LDP on unit vectors
    with led.release(["a", "b"], m):
        pass
    with led.release(["a"], m):  # fresh (unkeyed) noise again: spends again
        pass
    with led.release(["a"], m, key_id="k1"):
        pass
    with led.release(["a"], m, key_id="k1"):  # identical keyed re-release: free
        pass
    spent = {s.record_id: s for s in led.spent()}
    assert spent["s:a"].epsilon == pytest.approx(18.0) and spent["s:a"].free_releases == 1
    assert spent["s:a"].releases == 4 and spent["s:b"].epsilon == pytest.approx(6.0)


def test_gaussian_composition_matches_independent_single_release(tmp_path):
    led = Ledger(tmp_path / "l.db", budget_delta=1e-5)
    m = EmpiricalGaussianMechanism(sigma=0.5)
    with led.release([1], m):
        pass
    one = led.spent([1])[0].epsilon
    # PLD of one Gaussian event vs the exact analytic curve (discretisation 1e-3 is pessimistic)
    exact = analytic_gaussian_epsilon(0.5, 1e-5, 2.0)
    assert exact <= one <= exact * 1.01 + 1e-3
    with led.release([1], m):
        pass
    two = led.spent([1])[0].epsilon
    # two releases of sigma equal one release of sigma/sqrt(2) for Gaussian noise
    exact2 = analytic_gaussian_epsilon(0.5 / math.sqrt(2), 1e-5, 2.0)
    assert exact2 <= two <= exact2 * 1.01 + 1e-3
    assert two < 2 * one  # tighter than basic composition


def test_budget_refusal_names_records_and_writes_nothing(tmp_path):
    led = Ledger(tmp_path / "l.db", budget_epsilon=10.0, budget_delta=1e-5)
    m = LaplaceMechanism(epsilon=2.0)  # 4-LDP per release
    with led.release(["x", "y"], m):
        pass
    with led.release(["x"], m):
        pass
    wrote = []
    with pytest.raises(BudgetExceeded, match=r"1 record\(s\) would exceed .* s:x \(spent eps=8"):
        with led.release(["x", "y"], m):
            wrote.append(True)
    assert wrote == []
    assert {s.record_id: s.releases for s in led.spent()} == {"s:x": 2, "s:y": 1}
    # an exception inside the body records nothing
    with pytest.raises(RuntimeError), led.release(["y"], m):
        raise RuntimeError
    assert {s.record_id: s.releases for s in led.spent()}["s:y"] == 1


def test_budget_persists_in_the_file(tmp_path):
    Ledger(tmp_path / "l.db", budget_epsilon=1.0, budget_delta=1e-6).close()
    assert Ledger(tmp_path / "l.db").budget == (1.0, 1e-6)


def _worker(path: str, start: int, n_batches: int) -> None:
    led = Ledger(path)
    m = GaussianMechanism(epsilon=1.0, delta=1e-5)
    for b in range(n_batches):
        ids = [f"r{(start + b * 7 + i) % 40}" for i in range(10)]
        with led.release(ids, m):
            pass
    led.close()


@pytest.mark.slow
def test_two_concurrent_processes_neither_corrupt_nor_double_count(tmp_path):
    path = str(tmp_path / "l.db")
    Ledger(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(path, s, 30)) for s in (0, 3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    led = Ledger(path)
    rows = led.export()
    assert len(rows) == 2 * 30 * 10
    assert len({r["seq"] for r in rows}) == len(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["record_id"]] = counts.get(r["record_id"], 0) + 1
    assert sum(counts.values()) == 600
    assert {s.record_id: s.releases for s in led.spent()} == counts


def test_cli_budget_refusal_leaves_no_output(tmp_path):
    from privembed.io import write_embeddings

    runner = CliRunner()
    src = tmp_path / "e.parquet"
    write_embeddings(
        src,
        np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32),
        ids=list(range(20)),
    )
    led = tmp_path / "l.db"
    args = ["protect", str(src), "-m", "laplace", "--epsilon", "2", "--ledger", str(led)]
    r = runner.invoke(app, [*args, "-o", str(tmp_path / "a.parquet"), "--budget-epsilon", "6"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "b.parquet"
    r = runner.invoke(app, [*args, "-o", str(out)])
    assert r.exit_code == 2 and "release refused: 20 record(s)" in r.stderr
    assert not out.exists()
    r = runner.invoke(app, ["ledger", "spent", str(led), "--json"])
    assert r.exit_code == 0 and '"epsilon": 4.0' in r.stdout
    assert runner.invoke(app, ["ledger", "show", str(led)]).exit_code == 0
    assert runner.invoke(app, ["ledger", "export", str(led), "--format", "csv"]).exit_code == 0


def test_history_lookups_use_the_record_index_and_cover_every_chunk(tmp_path):
    from privembed import ledger as ledger_mod

    led = Ledger(tmp_path / "l.db")
    m = LaplaceMechanism(epsilon=1.0)
    n = 2 * ledger_mod._LOOKUP_CHUNK + 7  # three IN (...) chunks
    ids = [f"r{i}" for i in range(n)]
    with led.release(ids, m):
        pass
    with led.release(ids[::2], m):  # records spread over every chunk
        pass
    spent = {s.record_id: s.epsilon for s in led.spent(ids)}
    assert len(spent) == n
    assert all(spent[f"s:r{i}"] == pytest.approx(4.0 if i % 2 == 0 else 2.0) for i in range(n))
    assert {s.record_id for s in led.spent(["r1", "r2"])} == {"s:r1", "s:r2"}
    # a release reads only the rows of its own records, through the index (not a table scan)
    plan = " ".join(
        str(row[-1])
        for row in led._db.execute(
            "EXPLAIN QUERY PLAN SELECT record_id FROM releases WHERE record_id IN (?, ?) "
            "AND free = 0",
            ["s:r1", "s:r2"],
        )
    )
    assert "releases_record" in plan, plan
    led.set_budget(epsilon=5.0, delta=1e-6)
    with pytest.raises(BudgetExceeded, match=r"^release refused: 1 record\(s\)"):
        with led.release(["r0", "r1"], m):  # r0 spent 4 + 2 > 5; r1 spent 2 + 2 <= 5
            pass
