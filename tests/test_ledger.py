"""The privacy ledger: composition, free keyed re-release, budgets as ledger state, refusals,
concurrency, read-only inspection, and the attacks of "Guarantees that survive ordinary use".

The ledger's contract tests run on both backends (the ``where`` fixture: an SQLite file, or a
fresh database of a real PostgreSQL server from ``tests/_postgres.py``); tests of SQLite's own
machinery (files, migrations of older versions, its query plans and VM steps) run on SQLite.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
import sqlite3

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed import EmpiricalGaussianMechanism, GaussianMechanism, LaplaceMechanism
from privembed.cli import app
from privembed.core.accounting import UnsupportedGuarantee
from privembed.core.theory import analytic_gaussian_epsilon
from privembed.keys.ledger import (
    BudgetExceeded,
    BudgetRaise,
    DuplicateIds,
    Ledger,
    LedgerBusy,
    NotALedger,
    record_key,
)

from . import _signals


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, tmp_path) -> str:
    """Where a ledger lives: an SQLite file, or a PostgreSQL database (a URL)."""
    if request.param == "sqlite":
        return str(tmp_path / "l.db")
    return str(request.getfixturevalue("pg_url"))


def _hold_write_lock(where: str):
    """Another process's connection holding the ledger's write lock (until closed)."""
    if where.startswith("postgresql://"):
        import psycopg

        from privembed.keys.ledger_pg import LOCK_KEY

        holder = psycopg.connect(where, autocommit=True)
        holder.execute("SELECT pg_advisory_lock(%s::int4, %s::int4)", LOCK_KEY)
        return holder
    holder = sqlite3.connect(where, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def _release(led, ids, mech, *, tags=None, subject=None):
    """Stage and commit one release (what privembed.release.Release does around the noise)."""
    st = led.stage(mech, key_id="k1" if tags else None, subject=subject)
    st.add([record_key(i) for i in ids], tags=tags)
    st.commit()
    return st


def test_basic_composition_for_metric_and_free_keyed_rerelease(where, tmp_path):
    led = Ledger(where)
    m = LaplaceMechanism(epsilon=3.0)  # 3-d_X(l2) => 6-LDP on unit vectors
    _release(led, ["a", "b"], m)
    _release(led, ["a"], m)  # fresh (unkeyed) noise again: spends again
    _release(led, ["a"], m, tags=["t1"])
    st = _release(led, ["a"], m, tags=["t1"])  # identical keyed re-release (same tag): free
    assert st.fresh == 0
    _release(led, ["a"], m, tags=["t2"])  # same id, changed content (new tag): charged
    spent = {s.record_id: s for s in led.spent()}
    assert spent["s:a"].epsilon == pytest.approx(24.0) and spent["s:a"].free_releases == 1
    assert spent["s:a"].releases == 5 and spent["s:b"].epsilon == pytest.approx(6.0)


def test_gaussian_composition_matches_independent_single_release(where, tmp_path):
    led = Ledger(where, budget_delta=1e-5)
    m = EmpiricalGaussianMechanism(sigma=0.5)
    _release(led, [1], m)
    one = led.spent([1])[0].epsilon
    # PLD of one Gaussian event vs the exact analytic curve (discretisation 1e-3 is pessimistic)
    exact = analytic_gaussian_epsilon(0.5, 1e-5, 2.0)
    assert exact <= one <= exact * 1.01 + 1e-3
    _release(led, [1], m)
    two = led.spent([1])[0].epsilon
    # two releases of sigma equal one release of sigma/sqrt(2) for Gaussian noise
    exact2 = analytic_gaussian_epsilon(0.5 / math.sqrt(2), 1e-5, 2.0)
    assert exact2 <= two <= exact2 * 1.01 + 1e-3
    assert two < 2 * one  # tighter than basic composition


def test_budget_refusal_names_records_and_records_nothing(where, tmp_path):
    led = Ledger(where, budget_epsilon=10.0, budget_delta=1e-5)
    m = LaplaceMechanism(epsilon=2.0)  # 4-LDP per release
    _release(led, ["x", "y"], m)
    _release(led, ["x"], m)
    with pytest.raises(BudgetExceeded, match=r"1 record\(s\) would exceed .* 'x' \(spent eps=8"):
        _release(led, ["x", "y"], m)
    assert {s.record_id: s.releases for s in led.spent()} == {"s:x": 2, "s:y": 1}
    # a staged release that is never committed records nothing
    st = led.stage(m)
    st.add(["s:y"])
    st.discard()
    assert {s.record_id: s.releases for s in led.spent()}["s:y"] == 1
    # one release that alone exceeds the budget is refused before any work
    with pytest.raises(BudgetExceeded, match="one release of"):
        led.stage(LaplaceMechanism(epsilon=6.0))


def test_budget_persists_in_the_file(where, tmp_path):
    Ledger(where, budget_epsilon=1.0, budget_delta=1e-6).close()
    assert tuple(Ledger(where).budget) == (1.0, 1e-6)


def test_budget_flags_never_raise_or_reset(where, tmp_path):
    """A larger --budget-epsilon used to raise the stored budget; an omitted --budget-delta
    reset a stored 1e-8 to 1e-5."""
    p = where
    Ledger(p, budget_epsilon=8.0, budget_delta=1e-8).close()
    with pytest.raises(BudgetRaise, match=r"would raise it.*ledger budget .* --raise"):
        Ledger(p, budget_epsilon=16.0)
    with Ledger(p, budget_epsilon=8.0) as led:  # confirming keeps the stored delta
        assert tuple(led.budget) == (8.0, 1e-8)
    with pytest.raises(BudgetRaise):
        Ledger(p, budget_delta=1e-5)
    with Ledger(p, budget_epsilon=4.0) as led:  # lowering is allowed and recorded
        assert tuple(led.budget) == (4.0, 1e-8)
        with pytest.raises(BudgetRaise):
            led.set_budget(epsilon=20.0, delta=1e-8)
        msg = led.set_budget(epsilon=20.0, delta=1e-8, allow_raise=True)
        assert "raise" in msg and "was epsilon=4" in msg
        hist = led.budget_history()
    assert [h["action"] for h in hist] == ["set", "lower", "raise"]
    assert all(h["changed"] > 0 for h in hist)


def test_cli_budget_flag_cannot_raise_but_ledger_budget_can(where, tmp_path):
    from privembed.data.io import write_embeddings

    runner = CliRunner()
    src = tmp_path / "e.parquet"
    write_embeddings(src, np.random.default_rng(0).standard_normal((4, 8)), ids=[1, 2, 3, 4])
    led = where
    base = ["protect", str(src), "-m", "laplace", "--epsilon", "1", "--ledger", str(led)]
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "a.parquet"), "--budget-epsilon", "2",
                            "--budget-delta", "1e-8"])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "b.parquet"), "--budget-epsilon", "50"])
    assert r.exit_code == 2 and "would raise it" in " ".join(r.stderr.split())
    assert not (tmp_path / "b.parquet").exists()
    r = runner.invoke(app, ["ledger", "budget", str(led), "--epsilon", "50"])
    assert r.exit_code == 2 and "--raise" in " ".join(r.stderr.split())
    r = runner.invoke(app, ["ledger", "budget", str(led), "--epsilon", "50", "--raise"])
    assert r.exit_code == 0, r.output
    with Ledger(led, readonly=True) as L:
        assert tuple(L.budget) == (50.0, 1e-8)


def test_duplicate_ids_in_one_release_are_refused_across_batches(where, tmp_path):
    led = Ledger(where)
    st = led.stage(LaplaceMechanism(epsilon=1.0))
    st.add(["s:a", "s:b"])
    with pytest.raises(DuplicateIds, match="repeated: 'b'"):
        st.add(["s:c", "s:b"])
    with pytest.raises(DuplicateIds, match="repeated: 'd'"):
        st.add(["s:d", "s:d"])
    st.discard()
    assert led.spent() == []


def test_relations_do_not_mix_and_unknown_guarantees_are_refused(where, tmp_path):
    from privembed.mechanisms import PrivateProjection

    led = Ledger(where)
    _release(led, ["r"], PrivateProjection(k=4, epsilon=1.0, delta=1e-5))  # record level
    attr = PrivateProjection(k=4, epsilon=1.0, delta=1e-5, neighbouring="attribute")
    with pytest.raises(UnsupportedGuarantee, match="'attribute' release does not compose"):
        _release(led, ["r"], attr)
    with pytest.raises(UnsupportedGuarantee, match="implies no per-record LDP"):
        led.stage(LaplaceMechanism(epsilon=1.0, input_norm="none"))


def test_subject_budget_composes_over_all_its_records(where, tmp_path):
    led = Ledger(where)
    led.set_budget(epsilon=10.0, delta=1e-5, subject=True)
    m = LaplaceMechanism(epsilon=1.0)  # 2-LDP per record release
    _release(led, ["a", "b"], m, subject="alice")  # 4 spent
    _release(led, ["c", "d", "e"], m, subject="alice")  # 10 spent
    with pytest.raises(BudgetExceeded, match="subject 'alice' would exceed"):
        _release(led, ["f"], m, subject="alice")
    _release(led, ["f"], m, subject="bob")
    assert led.spent_subject("alice").epsilon == pytest.approx(10.0)
    # free re-releases cost the subject nothing
    _release(led, ["g"], m, subject="bob", tags=["t"])
    _release(led, ["g"], m, subject="bob", tags=["t"])
    assert led.spent_subject("bob").epsilon == pytest.approx(4.0)


def test_unpublished_releases_are_listed(where, tmp_path):
    led = Ledger(where)
    st = led.stage(LaplaceMechanism(epsilon=1.0), destination="/x/out.parquet")
    st.add(["s:a"])
    st.commit()  # then the process dies before the rename
    assert [u["destination"] for u in led.unpublished()] == ["/x/out.parquet"]
    st.mark_published()
    assert led.unpublished() == []


def _worker(path: str, start: int, n_batches: int) -> None:
    led = Ledger(path)
    m = GaussianMechanism(epsilon=1.0, delta=1e-5)
    for b in range(n_batches):
        ids = [f"r{(start + b * 7 + i) % 40}" for i in range(10)]
        _release(led, ids, m)
    led.close()


@pytest.mark.slow
def test_two_concurrent_processes_neither_corrupt_nor_double_count(where, tmp_path):
    path = where
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


def test_cli_budget_refusal_leaves_no_output(where, tmp_path):
    from privembed.data.io import write_embeddings

    runner = CliRunner()
    src = tmp_path / "e.parquet"
    write_embeddings(
        src,
        np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32),
        ids=list(range(20)),
    )
    led = where
    args = ["protect", str(src), "-m", "laplace", "--epsilon", "2", "--ledger", str(led)]
    r = runner.invoke(app, [*args, "-o", str(tmp_path / "a.parquet"), "--budget-epsilon", "6"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "b.parquet"
    r = runner.invoke(app, [*args, "-o", str(out)])
    assert r.exit_code == 2 and "release refused: 20 record(s)" in " ".join(r.stderr.split())
    assert not out.exists()
    r = runner.invoke(app, ["ledger", "spent", str(led), "--json"])
    assert r.exit_code == 0 and '"epsilon": 4.0' in r.stdout
    assert runner.invoke(app, ["ledger", "show", str(led)]).exit_code == 0
    assert runner.invoke(app, ["ledger", "export", str(led), "--format", "csv"]).exit_code == 0


def test_history_lookups_use_the_record_index_and_cover_every_chunk(tmp_path):
    from privembed.keys.ledger_sql import LOOKUP_CHUNK

    led = Ledger(tmp_path / "l.db")
    m = LaplaceMechanism(epsilon=1.0)
    n = 2 * LOOKUP_CHUNK + 7  # three IN (...) chunks
    ids = [f"r{i}" for i in range(n)]
    _release(led, ids, m)
    _release(led, ids[::2], m)  # records spread over every chunk
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
        _release(led, ["r0", "r1"], m)  # r0 spent 4 + 2 > 5; r1 spent 2 + 2 <= 5


def _sqlite_file(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO notes(body) VALUES ('unrelated data')")
    db.commit()
    db.close()
    return path.read_bytes()


@pytest.mark.parametrize("command", ["show", "spent", "export"])
def test_inspection_never_writes_and_refuses_other_files(tmp_path, command):
    runner = CliRunner()
    other = tmp_path / "other.db"
    before = _sqlite_file(other)
    r = runner.invoke(app, ["ledger", command, str(other)])
    assert r.exit_code == 2 and "not a privembed ledger" in " ".join(r.stderr.split())
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal / -shm
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    r = runner.invoke(app, ["ledger", command, str(garbage)])
    assert r.exit_code == 2 and garbage.read_bytes() == b"not sqlite at all" * 100


def test_writer_refuses_a_file_that_is_not_a_ledger(tmp_path):
    other = tmp_path / "other.db"
    before = _sqlite_file(other)
    with pytest.raises(NotALedger, match="left untouched"):
        Ledger(other)
    assert other.read_bytes() == before


def test_read_only_ledger_can_be_inspected(tmp_path):
    p = tmp_path / "l.db"
    with Ledger(p) as led:
        _release(led, ["a"], LaplaceMechanism(epsilon=1.0))
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    p.chmod(0o444)
    runner = CliRunner()
    for cmd in (["show", str(p)], ["spent", str(p), "--json"], ["export", str(p)]):
        r = runner.invoke(app, ["ledger", *cmd])
        assert r.exit_code == 0, r.output
    assert hashlib.sha256(p.read_bytes()).hexdigest() == digest
    # file permissions do not bind root (CI runs as root): the connection itself is read-only,
    # so no code path of an inspection can write, whoever runs it
    with Ledger(p, readonly=True) as led, pytest.raises(sqlite3.OperationalError, match="readonly"):
        led._sql.execute("INSERT INTO settings(name, value) VALUES ('x', 'y')")
    assert hashlib.sha256(p.read_bytes()).hexdigest() == digest


def test_spent_finds_int_and_string_ids(where, tmp_path):
    p = where
    with Ledger(p) as led:
        _release(led, [1, "x"], LaplaceMechanism(epsilon=1.0))
    r = CliRunner().invoke(app, ["ledger", "spent", str(p), "--id", "1", "--json"])
    assert r.exit_code == 0 and '"i:1"' in r.stdout, r.output


def test_first_version_ledgers_are_migrated(tmp_path):
    p = tmp_path / "v1.db"
    db = sqlite3.connect(p)
    db.executescript(
        """CREATE TABLE releases (seq INTEGER PRIMARY KEY AUTOINCREMENT, record_id TEXT NOT NULL,
        config_fp TEXT NOT NULL, key_id TEXT, kind TEXT NOT NULL, epsilon REAL NOT NULL,
        delta REAL NOT NULL, gauss_ratio REAL, guarantee TEXT NOT NULL, free INTEGER NOT NULL,
        output_digest TEXT, batch TEXT NOT NULL, created REAL NOT NULL);
        CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO settings VALUES ('budget_epsilon', '10.0'), ('budget_delta', '1e-05');
        INSERT INTO releases(record_id, config_fp, key_id, kind, epsilon, delta, gauss_ratio,
        guarantee, free, output_digest, batch, created) VALUES
        ('s:a', 'ff', NULL, 'metric_dp', 4.0, 0.0, NULL, '{}', 0, NULL, 'b1', 1.0);"""
    )
    db.commit()
    db.close()
    with Ledger(p, readonly=True) as led:  # inspection reads a v1 ledger as it is
        assert led.spent()[0].epsilon == pytest.approx(4.0)
    with Ledger(p) as led:
        assert tuple(led.budget) == (10.0, 1e-5)
        _release(led, ["a"], LaplaceMechanism(epsilon=2.0))
        assert led.spent(["a"])[0].epsilon == pytest.approx(8.0)


def test_lock_contention_is_a_bounded_wait_with_a_message(where, monkeypatch):
    """The wait ends at the ledger's timeout. The ledger's clock is replaced by one that
    advances 0.25 s per reading, so the test counts waits instead of timing them."""
    import privembed.keys.ledger as ledger_mod

    p = where
    Ledger(p).close()
    holder = _hold_write_lock(p)  # another process holds the write lock
    waited = []
    clock = iter(range(10**6))
    led = Ledger(p, timeout=2.0, on_wait=waited.append)
    monkeypatch.setattr(ledger_mod.time, "monotonic", lambda: next(clock) * 0.25)
    try:
        with led, pytest.raises(LedgerBusy, match="locked by another process"):
            _release(led, ["a"], LaplaceMechanism(epsilon=1.0))
        assert waited == [led.path]
        assert next(clock) < 20  # about timeout / 0.25 readings, not an unbounded loop
    finally:
        monkeypatch.undo()
        holder.close()
    # released later: the same release goes through
    with Ledger(p) as led:
        _release(led, ["a"], LaplaceMechanism(epsilon=1.0))


@pytest.mark.parametrize("cooperative", [True, False])
def test_sigint_is_not_ignored_while_waiting_for_the_lock(where, monkeypatch, cooperative):
    """Ctrl-C during a lock wait ends the wait at once: the signal is sent when the first wait
    begins (a named checkpoint, no timer), and a second wait would fail the test. Under
    :func:`privembed.core.cancel.cancellable` (the release front ends) the signal is recorded and the
    wait stops at its checkpoint; without it Python's own KeyboardInterrupt stops it."""
    import contextlib
    import signal

    from privembed.core import cancel

    p = where
    Ledger(p).close()
    holder = _hold_write_lock(p)
    waits: list[str] = []

    def inject(name: str) -> None:
        if name == "ledger.wait":
            waits.append(name)
            assert len(waits) == 1, "the wait went on after the signal"
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(cancel, "_inject", inject)
    try:
        ctx = cancel.cancellable() if cooperative else contextlib.nullcontext()
        with _signals.python_sigint(), Ledger(p, timeout=3600) as led, ctx:
            with pytest.raises(KeyboardInterrupt) as info:
                _release(led, ["a"], LaplaceMechanism(epsilon=1.0))
        assert isinstance(info.value, cancel.Cancelled) == cooperative
        assert waits == ["ledger.wait"]
    finally:
        holder.close()


# ---- the cost of accounting (issue 27): bounded per commit, whatever the history ----------


class _Work:
    """Python and C function calls made from Python, and SQLite VM steps (per 100
    instructions) while a block runs: a count of work, not a time."""

    def __init__(self, led: Ledger) -> None:
        self.led = led
        self.calls = 0
        self.steps = 0

    def __enter__(self) -> _Work:
        import sys

        def step() -> int:
            self.steps += 1
            return 0

        def prof(frame, event, arg):
            # Python functions and C functions called from Python (a per-row list.append in
            # a Python loop is work too, even when the loop calls no Python function)
            if event == "c_call" or (event == "call" and frame.f_code is not step.__code__):
                self.calls += 1

        self.led._db.set_progress_handler(step, 100)
        sys.setprofile(prof)
        return self

    def __exit__(self, *exc: object) -> None:
        import sys

        sys.setprofile(None)
        self.led._db.set_progress_handler(None, 0)


def _commit_work(led, ids, mech, *, subject=None):
    st = led.stage(mech, subject=subject)
    st.add([record_key(i) for i in ids])
    with _Work(led) as w:
        st.commit()
    return w


def test_subject_composition_per_commit_does_not_grow_with_the_subject_history(tmp_path):
    """The issue: per-subject composition was recomputed from every earlier release on every
    commit (and built a PLD each time). Now a commit reads the subject's running totals: the
    work of a commit after 600 releases equals the work after 6."""
    led = Ledger(tmp_path / "l.db")
    led.set_budget(epsilon=math.inf, delta=1e-5, subject=True)
    m = GaussianMechanism(epsilon=1.0, delta=1e-5)
    works = []
    for i in range(601):
        w = _commit_work(led, [f"r{i}"], m, subject="alice")
        if i in (6, 600):
            works.append(w)
    early, late = works
    assert late.calls <= early.calls + 50, (early.calls, late.calls)  # a root-finding: O(1)
    assert late.steps <= early.steps + 5, (early.steps, late.steps)
    assert led.spent_subject("alice").releases == 601


def test_record_composition_per_commit_does_not_grow_with_the_number_of_records(tmp_path):
    """``protect --ledger`` re-releasing many records: the per-record budget check is done in
    SQL per distinct history, so its Python work is the same for 20 and 2,000 records."""
    led = Ledger(tmp_path / "l.db", budget_epsilon=1e6, budget_delta=1e-5)
    m = GaussianMechanism(epsilon=1.0, delta=1e-5)
    small, large = [f"a{i}" for i in range(20)], [f"b{i}" for i in range(2000)]
    _commit_work(led, small, m)
    _commit_work(led, large, m)
    w_small = _commit_work(led, small, m)  # second release of each: one history to compose
    w_large = _commit_work(led, large, m)
    assert w_large.calls <= w_small.calls + 5, (w_small.calls, w_large.calls)
    assert {s.epsilon for s in led.spent(["a0", "b1999"])} == {led.spent(["a1"])[0].epsilon}


def test_per_record_refusal_still_names_the_records_over_budget(where, tmp_path):
    m = GaussianMechanism(epsilon=1.0, delta=1e-5)
    led = Ledger(where, budget_epsilon=1.7, budget_delta=1e-5)
    _release(led, ["x", "y"], m)
    _release(led, ["x"], m)  # x: two releases (eps 1.465), y: one (eps 1); three: 1.835
    with pytest.raises(
        BudgetExceeded, match=r"1 record\(s\) would exceed .* 'x' \(spent eps=1\.465"
    ):
        _release(led, ["x", "y", "z"], m)
    _release(led, ["y", "z"], m)


def _as_v2(path) -> None:
    """Turn a ledger into what the previous version wrote: no totals, no aliases, version 2."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE subject_totals")
    db.execute("DROP TABLE aliases")
    db.execute("DELETE FROM settings WHERE name = 'totals_seq'")
    db.execute("PRAGMA user_version = 2")
    db.close()


def test_subject_totals_are_built_for_older_ledgers_and_catch_up_with_older_writers(tmp_path):
    p = tmp_path / "l.db"
    lap = LaplaceMechanism(epsilon=1.0)  # 2-LDP per release
    with Ledger(p) as led:
        _release(led, ["a", "b"], lap, subject="alice")
        _release(led, ["c"], lap, subject="bob")
    _as_v2(p)
    with Ledger(p, readonly=True) as led:  # inspection reads a v2 ledger as it is
        assert led.spent_subject("alice").epsilon == pytest.approx(4.0)
        assert led.subjects() == ["alice", "bob"]
    with Ledger(p) as led:  # the writer migrates it: totals from every earlier release
        assert led._db.execute("PRAGMA user_version").fetchone()[0] == 3
        assert led.spent_subject("alice").epsilon == pytest.approx(4.0)
        led.set_budget(epsilon=7.0, delta=1e-5, subject=True)
    # a writer of the previous version appends a release without touching the totals
    db = sqlite3.connect(p, isolation_level=None)
    db.execute(
        "INSERT INTO releases(record_id, subject, config_fp, relation, epsilon, delta, free, "
        "batch, created) VALUES ('s:d', 'alice', 'ff', 'record', 2.0, 0.0, 0, 'old', 1.0)"
    )
    db.close()
    with Ledger(p) as led:
        assert led.spent_subject("alice").epsilon == pytest.approx(6.0)
        assert led.subjects() == ["alice", "bob"]
        with pytest.raises(BudgetExceeded, match="subject 'alice' would exceed"):
            _release(led, ["e"], lap, subject="alice")  # 6 + 2 > 7: the old row counts
        _release(led, ["e"], lap, subject="bob")
        assert led.spent_subject("bob").epsilon == pytest.approx(4.0)


# ---- clean-vector aliases: ledger state (issue 24, finding 6) -------------------------------


def test_aliases_are_ledger_state_bounded_and_survive_reopening(where, tmp_path):
    p = where
    with Ledger(p) as led:
        assert led.claim_aliases(["t1", "t2"], ["A", "B"]) == ["A", "B"]
        # a later text with t1's clean vector belongs to A; a repeated tag within one call too
        assert led.claim_aliases(["t1", "t3", "t3"], ["Z", "C", "D"]) == ["A", "C", "C"]
    with Ledger(p) as led:  # a restart keeps them
        assert led.claim_aliases(["t2", "t1"], ["X", "Y"]) == ["B", "A"]
        # bounded: at capacity the least recently used tag is forgotten
        assert led.claim_aliases(["t4"], ["D"], capacity=3) == ["D"]
        assert led._sql.execute("SELECT COUNT(*) FROM aliases").fetchone()[0] == 3
        assert led.claim_aliases(["t3"], ["N"], capacity=3) == ["N"]  # t3 was the oldest
        assert led.claim_aliases(["t1"], ["N"], capacity=3) == ["A"]
    with Ledger(p, readonly=True) as led, pytest.raises(PermissionError, match="read-only"):
        led.claim_aliases(["t9"], ["Q"])
    with Ledger(p) as led, pytest.raises(ValueError, match="same length"):
        led.claim_aliases(["t9"], [])


def test_per_record_check_with_mixed_histories_tests_each_record(where, tmp_path):
    """The quick test takes the largest basic epsilon and the largest Gaussian part over all
    records as one history; when that fails although every record alone passes (one record's
    history is Laplace, another's Gaussian), each record is tested and the release goes on."""
    from privembed.core.accounting import Composition, cost_of

    lap, gauss = LaplaceMechanism(epsilon=2.0), GaussianMechanism(epsilon=4.0, delta=1e-5)
    more = GaussianMechanism(epsilon=3.0, delta=1e-5)
    led = Ledger(where, budget_epsilon=9.0, budget_delta=1e-5)
    _release(led, ["a"], lap)  # a: pure 4
    _release(led, ["b"], gauss)  # b: Gaussian, epsilon 4
    c_lap, c_gauss, c_more = (cost_of(m.guarantee) for m in (lap, gauss, more))
    assert Composition().add(c_lap).add(c_more).at(1e-5)[0] <= 9.0  # a alone passes
    assert Composition().add(c_gauss).add(c_more).at(1e-5)[0] <= 9.0  # b alone passes
    assert Composition().add(c_lap).add(c_gauss).add(c_more).at(1e-5)[0] > 9.0  # not both
    _release(led, ["a", "b"], more)
    # one more release of epsilon 8.5 takes b past the budget; c (new) passes
    with pytest.raises(BudgetExceeded, match=r"^release refused: 1 record\(s\) .* 'b' \(spent"):
        _release(led, ["b", "c"], GaussianMechanism(epsilon=8.5, delta=1e-5))
    assert {s.record_id: s.releases for s in led.spent()} == {"s:a": 2, "s:b": 2}


def test_alias_claims_and_publication_commit_with_the_release(tmp_path):
    """What the server does per batch: aliases looked up (a read), claimed and the release
    recorded and marked published in one write transaction -- also when the budget refuses the
    release (a refused text's vector stays claimed, so its variants land on it)."""
    p = tmp_path / "l.db"
    m = LaplaceMechanism(epsilon=2.0)  # 4 per release
    led = Ledger(p, budget_epsilon=4.0, budget_delta=1e-5)
    writes: list[str] = []
    led._db.set_trace_callback(lambda sql: writes.append(sql) if sql == "BEGIN IMMEDIATE" else 0)
    assert led.lookup_aliases(["t1"]) == {}
    st = led.stage(m)
    st.add([record_key("a")])
    st.claim_aliases(["t1"], ["s:a"])
    st.commit(published=True)
    assert len(writes) == 1 and led.unpublished() == []
    assert led.lookup_aliases(["t1", "t2"]) == {"t1": "s:a"}
    st = led.stage(m)
    st.add([record_key("a"), record_key("b")])
    st.claim_aliases(["t1", "t2"], ["s:a", "s:b"])
    with pytest.raises(BudgetExceeded):
        st.commit(published=True)
    assert len(writes) == 2
    assert led.lookup_aliases(["t2"]) == {"t2": "s:b"}  # claimed although refused
    assert {s.record_id for s in led.spent()} == {"s:a"}


def test_an_alias_claimed_by_another_process_meanwhile_refuses_the_commit(where, tmp_path):
    from privembed.keys.ledger import AliasConflict

    p = where
    mine, other = Ledger(p), Ledger(p)
    assert mine.lookup_aliases(["t"]) == {}
    st = mine.stage(LaplaceMechanism(epsilon=1.0))
    st.add([record_key("z")])
    st.claim_aliases(["t"], ["s:z"])
    assert other.claim_aliases(["t"], ["s:a"]) == ["s:a"]  # between the lookup and the commit
    with pytest.raises(AliasConflict, match="look the aliases up again"):
        st.commit(published=True)
    assert mine.spent() == [] and mine.lookup_aliases(["t"]) == {"t": "s:a"}


def test_per_record_subjects_are_charged_each_to_its_own(where):
    led = Ledger(where)
    led.set_budget(epsilon=4.0, delta=1e-5, subject=True)
    m = LaplaceMechanism(epsilon=1.0)  # 2 per record release
    st = led.stage(m)
    st.add([record_key(i) for i in "abc"], subjects=["alice", "bob", "alice"])
    st.commit()
    assert led.spent_subject("alice").epsilon == pytest.approx(4.0)
    assert led.spent_subject("bob").epsilon == pytest.approx(2.0)
    st = led.stage(m)
    st.add([record_key("d"), record_key("e")], subjects=["alice", "bob"])
    with pytest.raises(BudgetExceeded, match="subject 'alice' would exceed"):
        st.commit()
    assert led.spent_subject("bob").releases == 1
    led.close()


def test_current_releases_are_the_latest_published_and_any_after_it(where):
    """What a reader may still meet of each record (issue 24.10, the collection's rollback
    check): the latest *published* release and any committed after it (its output may not
    exist: a crash between commit and publication), never an older published one."""
    m = LaplaceMechanism(epsilon=1.0)
    d = {n: hashlib.sha256(n.encode()).hexdigest()[:32] for n in ("a1", "a2", "a3", "b1")}
    with Ledger(where) as led:

        def release(key: str, digest: str, *, published: bool) -> None:
            st = led.stage(m)
            st.add([record_key(key)], output_digests=[d[digest]])
            st.commit()
            if published:
                st.mark_published()

        release("a", "a1", published=True)
        release("b", "b1", published=False)  # never published: whatever it wrote may appear
        assert led.current_releases([record_key("a"), record_key("b"), record_key("c")]) == {
            record_key("a"): {bytes.fromhex(d["a1"])},
            record_key("b"): {bytes.fromhex(d["b1"])},
        }
        release("a", "a2", published=True)  # the edit: a1 is now a rolled-back copy
        assert led.current_releases([record_key("a")])[record_key("a")] == {bytes.fromhex(d["a2"])}
        release("a", "a3", published=False)  # committed, output not (yet) published
        assert led.current_releases([record_key("a")])[record_key("a")] == {
            bytes.fromhex(d["a2"]),
            bytes.fromhex(d["a3"]),
        }
