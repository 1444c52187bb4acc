"""Signals against the release: never an output without its ledger record, never a traceback.

``privembed protect`` with a ledger receives SIGINT, SIGTERM or SIGKILL at every named point of
:mod:`privembed.core.cancel` -- from the interpreter's start-up to after the rename -- delivered by
the process to itself when it reaches the point (``PRIVEMBED_FAULT_AT``), so every outcome is
deterministic however busy the machine is (the earlier version of this test killed at fractions
of a measured run time, and failed on a loaded CI machine). After every signal:

* an output that exists has a committed ledger release of all its rows for that destination;
* SIGINT/SIGTERM: exit status 128 + signal, no traceback, no temporary file, and one line on
  stderr: ``interrupted``/``terminated`` where the run stopped before its commit (no output), or,
  where the release went on to completion (a signal held between the commit and the rename, or
  one after the rename, until the process's very end), that the output was published and is
  complete -- never an exit by the signal itself with no message (the issue: -15/-2 when it
  landed in the interpreter's teardown);
* SIGKILL may leave a temporary file, which the next run on that destination removes; a kill
  between the commit and the rename leaves a charged release without output, listed as
  unpublished (conservative).

``protect-stream`` gets the same signals between its batches: every line it printed is charged.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from privembed.core.cancel import POINTS
from privembed.data.io import write_embeddings
from privembed.keys.keyed import keygen
from privembed.keys.ledger import Ledger

from . import _signals

N_ROWS, BATCH = 6000, 2000  # three batches: "#2" lands in the middle of the run
SCRIPT = Path(sys.executable).with_name("privembed")
PER_BATCH = ("batch.read", "batch.drawn", "batch.written")


def _cmd(src: Path, out: Path, key: Path, led: Path) -> list[str]:
    return [
        str(SCRIPT), "protect", str(src), "-o", str(out), "-m", "laplace", "--epsilon", "5",
        "--key-file", str(key), "--ledger", str(led), "--batch-rows", str(BATCH),
    ]  # fmt: skip


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


def _committed_rows(led: Path, dest: str) -> int:
    if not led.exists():
        return 0
    with Ledger(led, readonly=True) as L:
        rows = L._db.execute(
            "SELECT records FROM batches WHERE destination = ?", (dest,)
        ).fetchall()
    return sum(r[0] for r in rows)


def _fault(point: str, sig: signal.Signals) -> str:
    return f"{point}{'#2' if point in PER_BATCH else ''}:{sig.name}"


def _expect_stopped(point: str) -> bool:
    """Whether a SIGINT/SIGTERM at ``point`` stops the run (after the commit it completes)."""
    return point not in ("commit.after", "publish.after", "command.end", "ledger.wait")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not SCRIPT.exists():
        pytest.skip(f"the console script is not installed next to {sys.executable}")
    root = tmp_path_factory.mktemp("signals")
    src = root / "in.parquet"
    X = np.random.default_rng(0).standard_normal((N_ROWS, 16)).astype(np.float32)
    write_embeddings(src, X, ids=list(range(N_ROWS)))
    key = root / "k.key"
    keygen(key)
    return root, src, key


# SIGINT at every point; SIGTERM takes the same cooperative path (checked where it matters);
# SIGKILL where the files or the ledger differ from one point to the next
SIGTERM_AT = ("startup", "batch.drawn", "commit.after", "publish.after", "command.end")
CASES = {
    p: [signal.SIGINT]
    + ([signal.SIGTERM] if p in SIGTERM_AT else [])
    + ([signal.SIGKILL] if p not in ("startup", "command.start", "batch.read") else [])
    for p in POINTS
    if p != "ledger.wait"  # tests/test_ledger.py: the wait ends at the first signal
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CASES))
def test_no_output_without_its_ledger_rows_at_any_named_point(setup, point):
    root, src, key = setup
    env = {**os.environ, "PRIVEMBED_NUM_THREADS": "1"}
    for sig in CASES[point]:
        work = root / f"{point}-{sig.name}"
        work.mkdir()
        out, led = work / "out.parquet", work / "ledger.db"
        r = _signals.run(_cmd(src, out, key, led), env={**env, "PRIVEMBED_FAULT_AT":
                         _fault(point, sig)}, capture_output=True, text=True, timeout=300)  # fmt: skip
        dest = str(out.resolve())
        published = out.exists()
        where = (point, sig.name, r.returncode, r.stderr[-500:])
        assert "Traceback" not in r.stderr, where
        if published:
            assert _committed_rows(led, dest) == N_ROWS, where
        if sig == signal.SIGKILL:
            assert r.returncode == -signal.SIGKILL, where
            stale = [t for t in _temps(work) if t.name.startswith(f".{out.name}.")]
            if point == "commit.after":
                # charged, not published: conservative, and listed
                assert not published and _committed_rows(led, dest) == N_ROWS, where
                with Ledger(led, readonly=True) as L:
                    assert [u["destination"] for u in L.unpublished()] == [dest]
            if stale:  # the next run on that destination removes it
                again = _signals.run(_cmd(src, out, key, led), env=env, capture_output=True,
                                     text=True, timeout=300)  # fmt: skip
                assert again.returncode == 0, again.stderr
                assert not [t for t in _temps(work) if t.name.startswith(f".{out.name}.")]
            continue
        assert not _temps(work), where
        if _expect_stopped(point):
            assert r.returncode == 128 + sig and not published, where
            word = "interrupted" if sig == signal.SIGINT else "terminated"
            assert r.stderr.strip().splitlines() == [word], where
            if point in ("startup", "command.start", "output.opened", "batch.read"):
                # nothing was committed: the ledger this run created is gone again
                assert not led.exists(), where
        else:  # complete: it says so, with the signal's status
            assert r.returncode == 128 + sig and published, where
            word = "interrupted" if sig == signal.SIGINT else "terminated"
            line = f"{word}: the output was published and is complete"
            lines = r.stderr.strip().splitlines()
            assert lines[-1] == line and sum(word in x for x in lines) == 1, where


@pytest.mark.slow
@pytest.mark.parametrize("point", PER_BATCH)
def test_a_stream_never_prints_an_uncharged_line(setup, point, tmp_path):
    _, _, key = setup
    rng = np.random.default_rng(1)
    lines = "".join(
        json.dumps({"id": f"n{i}", "embedding": rng.standard_normal(8).round(4).tolist()}) + "\n"
        for i in range(30)
    )
    for sig in (signal.SIGINT, signal.SIGTERM) if point == "batch.drawn" else (signal.SIGINT,):
        led = tmp_path / f"{sig.name}.db"
        r = _signals.run(
            [str(SCRIPT), "protect-stream", "-m", "laplace", "--epsilon", "5", "--key-file",
             str(key), "--ledger", str(led), "--batch-rows", "10"],
            input=lines, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PRIVEMBED_FAULT_AT": _fault(point, sig)},
        )  # fmt: skip
        assert r.returncode == 128 + sig, r.stderr
        assert r.stderr.strip().splitlines()[-1:] == [
            "interrupted" if sig == signal.SIGINT else "terminated"
        ]
        assert "Traceback" not in r.stderr
        printed = [json.loads(x)["id"] for x in r.stdout.splitlines() if x.strip()]
        assert len(printed) in (10, 20)  # stopped between batches, never inside one
        with Ledger(led, readonly=True) as L:
            charged = {s.record_id for s in L.spent()}
        assert {f"s:{i}" for i in printed} <= charged


def test_every_named_point_is_reached_by_a_protect_run(setup, tmp_path):
    """The points the tests above target all exist on the path (a renamed or removed
    checkpoint would make its kill point test nothing)."""
    from privembed import LaplaceMechanism
    from privembed.core import cancel
    from privembed.release import protect_file

    _, src, key = setup
    seen: list[str] = []
    real = cancel._inject
    try:
        cancel._inject = lambda name: seen.append(name)  # type: ignore[assignment]
        protect_file(src, tmp_path / "o.parquet", LaplaceMechanism(epsilon=5.0), key=key,
                     ledger=tmp_path / "l.db", batch_rows=BATCH)  # fmt: skip
    finally:
        cancel._inject = real  # type: ignore[assignment]
    expected = set(POINTS) - {"startup", "ledger.wait", "command.end"}  # the console's
    assert expected <= set(seen), expected - set(seen)
    assert seen.count("batch.drawn") == N_ROWS // BATCH


def test_the_signal_tests_set_sigint_themselves_whatever_the_runner_inherited(setup, tmp_path):
    """The issue: the suite started as a background job (``make test &``, ``nohup``) inherits
    SIGINT *ignored*, privembed rightly keeps it so, and 16 signal tests failed. The tests set
    the disposition they need (tests/_signals.py): with SIGINT ignored in this process, a run's
    injected SIGINT still stops it, and Python's handler still raises here."""
    _, src, key = setup
    out, led = tmp_path / "out.parquet", tmp_path / "ledger.db"
    env = {**os.environ, "PRIVEMBED_FAULT_AT": _fault("batch.drawn", signal.SIGINT)}
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background job gets
    try:
        r = _signals.run(_cmd(src, out, key, led), env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
        with _signals.python_sigint(), pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert (r.returncode, r.stderr.strip().splitlines()) == (130, ["interrupted"]), r.stderr
    assert not out.exists()
