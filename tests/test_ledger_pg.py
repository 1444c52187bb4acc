"""The ledger on PostgreSQL: what a shared database adds to the contract that test_ledger.py
runs on both backends -- lost and refused connections, read-only sessions, databases that are
not ledgers, secrets in URLs, values PostgreSQL text cannot hold, hostile strings, and budget
checks under concurrent writers in several processes (a real server: tests/_postgres.py)."""

from __future__ import annotations

import multiprocessing as mp

import psycopg
import pytest
from typer.testing import CliRunner

from privembed import LaplaceMechanism
from privembed.cli import app
from privembed.core._validation import DataError
from privembed.keys.ledger import (
    BudgetExceeded,
    Ledger,
    LedgerBusy,
    LedgerUnreachable,
    NotALedger,
    record_key,
    redact_url,
)

from ._postgres import allow_connections, terminate

SECRET = "pw-s3cr3t-never-shown"


def _release(led, ids, mech, *, subject=None):
    st = led.stage(mech, subject=subject)
    st.add([record_key(i) for i in ids])
    st.commit()
    return st


def _with_password(url: str) -> str:
    """The same database with a password in the URL (trust authentication ignores it)."""
    return url.replace("postgres:@", f"postgres:{SECRET}@", 1)


def test_a_lost_connection_refuses_the_commit_and_records_nothing(pg_server, pg_database, pg_url):
    led = Ledger(pg_url)
    m = LaplaceMechanism(epsilon=1.0)
    _release(led, ["a"], m)
    st = led.stage(m, subject="alice")
    st.add([record_key("b")])
    real_commit = led._sql.commit

    def cut_then_commit() -> None:  # the named point: the backend's COMMIT
        assert terminate(pg_server, pg_database) >= 1
        real_commit()

    led._sql.commit = cut_then_commit
    with pytest.raises(LedgerUnreachable, match="lost the connection") as info:
        st.commit()
    assert not st.committed
    assert "\n" not in str(info.value)
    led._sql.commit = real_commit
    # the next operation connects again; nothing of the cut release was recorded
    assert {s.record_id for s in led.spent()} == {"s:a"}
    assert led.spent_subject("alice").releases == 0
    _release(led, ["b"], m, subject="alice")
    assert led.spent_subject("alice").releases == 1
    led.close()


def test_a_release_staged_before_a_reconnection_cannot_commit(pg_server, pg_database, pg_url):
    led = Ledger(pg_url)
    m = LaplaceMechanism(epsilon=1.0)
    st = led.stage(m)
    st.add([record_key("a")])
    terminate(pg_server, pg_database)
    with pytest.raises(LedgerUnreachable):
        led.spent()  # finds the dead connection
    assert led.spent() == []  # connects again
    with pytest.raises(LedgerUnreachable, match="lost while this release was staged"):
        st.commit()
    st.discard()
    assert led.spent() == []
    led.close()


def test_an_unreachable_database_is_one_line_without_the_password(pg_server, pg_database, pg_url):
    url = _with_password(pg_url)
    Ledger(url).close()
    allow_connections(pg_server, pg_database, False)
    try:
        with pytest.raises(LedgerUnreachable) as info:
            Ledger(url)
        msg = str(info.value)
        assert "cannot reach the ledger database" in msg and "\n" not in msg
        assert SECRET not in msg and "postgres:***@" in msg
        r = CliRunner().invoke(app, ["ledger", "show", url])
        assert r.exit_code == 2 and SECRET not in r.output
        assert "cannot reach" in " ".join(r.stderr.split())
    finally:
        allow_connections(pg_server, pg_database, True)


def test_the_password_is_never_shown(pg_url, tmp_path):
    url = _with_password(pg_url)
    runner = CliRunner()
    with Ledger(url, budget_epsilon=8.0) as led:
        _release(led, ["a"], LaplaceMechanism(epsilon=1.0))
        assert SECRET not in str(led.path) and SECRET not in str(led.summary())
        with pytest.raises(ValueError, match="would raise it") as info:
            led.set_budget(epsilon=9.0, delta=1e-5)
        assert SECRET not in str(info.value)
    for cmd in (["show", url], ["spent", url], ["export", url], ["budget", url]):
        r = runner.invoke(app, ["ledger", *cmd])
        assert r.exit_code == 0, r.output
        assert SECRET not in r.output, cmd
    r = runner.invoke(app, ["ledger", "show", url, "--json"])
    assert "postgresql://postgres:***@" in r.stdout
    assert redact_url(url) == url.replace(SECRET, "***")


def test_inspection_is_a_read_only_session(pg_url):
    with Ledger(pg_url) as led:
        _release(led, ["a"], LaplaceMechanism(epsilon=1.0))
    with Ledger(pg_url, readonly=True) as led:
        with pytest.raises(PermissionError, match="read-only"):
            led.set_budget(epsilon=1.0, delta=1e-6)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            led._sql.execute("DELETE FROM releases")  # the server itself refuses writes
        assert led.backend == "postgresql"


def test_a_database_that_is_not_a_ledger_is_refused_and_left_untouched(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO settings VALUES ('theme', 'dark')")
    for readonly in (False, True):
        with pytest.raises(NotALedger, match=r"not a privembed ledger.*left untouched"):
            Ledger(pg_url, readonly=readonly)
    with psycopg.connect(pg_url, autocommit=True) as db:
        assert db.execute("SELECT * FROM settings").fetchall() == [("theme", "dark")]
        tables = db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert tables == [("settings",)]


def test_inspecting_an_empty_database_creates_nothing(pg_url):
    with pytest.raises(NotALedger, match="holds no privembed ledger; nothing was written"):
        Ledger(pg_url, readonly=True)
    r = CliRunner().invoke(app, ["ledger", "spent", pg_url])
    assert r.exit_code == 2
    with psycopg.connect(pg_url, autocommit=True) as db:
        n = db.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()[0]
    assert n == 0


@pytest.mark.parametrize("bad", ["a\x00b", "\udcff"])
def test_values_postgres_text_cannot_hold_are_one_line_errors(pg_url, bad):
    """A NUL character (or an unpaired surrogate) cannot be PostgreSQL text: the release is
    refused with one line, nothing recorded, the ledger usable after it."""
    with Ledger(pg_url) as led:
        st = led.stage(LaplaceMechanism(epsilon=1.0))
        with pytest.raises(DataError, match="cannot store a value") as info:
            st.add(["s:ok", "s:" + bad])
        assert "\n" not in str(info.value)
        st.discard()
        with pytest.raises(DataError):
            _release(led, ["x"], LaplaceMechanism(epsilon=1.0), subject="s" + bad)
        assert led.spent() == []
        _release(led, ["ok"], LaplaceMechanism(epsilon=1.0))
        assert [s.record_id for s in led.spent()] == ["s:ok"]


HOSTILE = [
    "'; DROP TABLE releases; --",
    'x" OR "1"="1',
    "a' OR '1'='1",
    "?", "%s", "%(x)s", "$1", "/* c */", "\\", "é中文😀", "ʼ", "\u202e", "x" * 10_000,
]  # fmt: skip


def test_hostile_ids_subjects_and_aliases_are_data(pg_url):
    """Ids, subjects and alias tags are bound parameters: stored and found verbatim."""
    m = LaplaceMechanism(epsilon=1.0)
    with Ledger(pg_url) as led:
        _release(led, HOSTILE, m, subject=HOSTILE[0])
        _release(led, HOSTILE[:3], m, subject=HOSTILE[-1])
        spent = {s.record_id: s for s in led.spent(HOSTILE)}
        assert set(spent) == {record_key(h) for h in HOSTILE}
        assert spent[record_key(HOSTILE[1])].releases == 2
        assert led.spent_subject(HOSTILE[0]).releases == len(HOSTILE)
        assert led.subjects() == sorted([HOSTILE[0], HOSTILE[-1]])
        assert led.claim_aliases(HOSTILE, HOSTILE[::-1]) == HOSTILE[::-1]
        assert led.lookup_aliases(HOSTILE[:2]) == {HOSTILE[0]: HOSTILE[-1], HOSTILE[1]: HOSTILE[-2]}
        assert len(led.export()) == len(HOSTILE) + 3


def _spend(url: str, worker: int, attempts: int, out) -> None:
    """One process: release one new record of subject 'alice' per attempt."""
    led = Ledger(url, timeout=600)
    m = LaplaceMechanism(epsilon=1.0)  # 2 per record
    done = 0
    for i in range(attempts):
        try:
            _release(led, [f"w{worker}-{i}"], m, subject="alice")
            done += 1
        except BudgetExceeded:
            pass
    led.close()
    out.put(done)


@pytest.mark.slow
def test_concurrent_processes_never_spend_past_a_subject_budget(pg_url):
    """Four processes race for one subject's budget (room for 30 releases, 100 attempts): the
    ledger records exactly 30, each process counts only what was committed for it."""
    with Ledger(pg_url) as led:
        led.set_budget(epsilon=60.0, delta=1e-5, subject=True)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_spend, args=(pg_url, w, 25, out)) for w in range(4)]
    for p in procs:
        p.start()
    counts = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Ledger(pg_url, readonly=True) as led:
        s = led.spent_subject("alice")
        assert s.releases == sum(counts) == 30
        assert s.epsilon == pytest.approx(60.0)
        assert len(led.export()) == 30


def test_lock_busy_and_unreachable_are_both_ledger_busy():
    """Callers that refuse ledger-bound work on LedgerBusy (the server: 503) also refuse it
    when the database cannot be reached."""
    assert issubclass(LedgerUnreachable, LedgerBusy)
