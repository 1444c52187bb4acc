"""Long commands say how far they are off a terminal (issue 40.3).

``evaluate`` ran 31 minutes with an empty log, ``attack inversion`` printed nothing for more than
10 minutes, ``embed`` of 117,659 texts nothing for 29 minutes: progress bars are drawn on a
terminal only. Off one, a line now goes to stderr every ``PRIVEMBED_PROGRESS_INTERVAL`` seconds
(default 10), and work that will take more than a minute is announced with its estimate. Every
test here moves an injected clock by hand: no sleeps, nothing that depends on the machine's
speed (the suite itself sets the interval to 0, see ``tests/conftest.py``).
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
from typer.testing import CliRunner

from privembed._cli import common
from privembed._cli.common import LogProgress
from privembed.cli import app


class Clock:
    """Seconds that move only when the test says so (``step`` per reading, default 0)."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 1000.0
        self.step = step

    def __call__(self) -> float:
        t = self.now
        self.now += self.step
        return t


def _log(total, *, unit="texts", description="embedding", interval=10.0):
    clock, lines = Clock(), []
    log = LogProgress(description, total, unit=unit, interval=interval, clock=clock,
                      write=lines.append)  # fmt: skip
    return log, clock, lines


def test_a_long_job_is_announced_with_its_estimate_then_reports_every_interval():
    """The issue's case: 117,659 texts at 68 texts/s is announced as about 29 minutes."""
    log, clock, lines = _log(117_659)
    with log:
        clock.now += 4  # loading the model: not work done at the embedding's rate
        log.update(256)
        assert lines == []  # nothing before the first interval
        for _ in range(3):
            clock.now += 4
            log.update(log._done + 272)  # 68 texts/s
        assert lines == ["embedding 117,659 texts: about 29 min at 68 texts/s"]
        clock.now += 10
        log.update(log._done + 680)
        assert lines[1] == "embedding: 1,752/117,659 texts (1%), 68 texts/s, about 28 min left"
        clock.now += 5
        log.update(log._done + 340)
        assert len(lines) == 2  # the next line is due 10 s after the last
        clock.now = 1000 + 4 + 117_403 / 68
        log.update(117_659)
    assert len(lines) == 4
    assert lines[-1] == "embedding: 117,659 texts in 29 min (68 texts/s)"


def test_a_line_is_written_while_no_progress_is_reported():
    """An epoch or a batch that takes minutes: the ticker writes what is known so far."""
    log, clock, lines = _log(40, unit="epochs", description="training")
    clock.now += 12
    log.tick()
    assert lines == ["training: 0/40 epochs, 12 s elapsed"]
    log.tick()  # not due again yet
    clock.now += 600
    log.tick()
    assert lines[-1] == "training: 0/40 epochs, 10 min elapsed"


def test_quick_work_writes_nothing_and_short_work_is_not_announced():
    log, clock, lines = _log(1_000)
    with log:
        for _ in range(4):
            clock.now += 1
            log.update(log._done + 250)
    assert lines == []
    log, clock, lines = _log(1_000)
    with log:
        for _ in range(10):  # 40 s in all: reported, never announced
            clock.now += 4
            log.update(log._done + 100)
    assert lines[0].startswith("embedding: 300/1,000 texts (30%), 25 texts/s, about 28 s left")
    assert lines[-1] == "embedding: 1,000 texts in 40 s (25 texts/s)"
    assert not any(ln.startswith("embedding 1,000") for ln in lines)


def test_without_a_total_the_lines_give_the_count_rate_and_time_elapsed():
    log, clock, lines = _log(None, unit="runs", description="sweeping", interval=60)
    with log:
        log.advance(0)
        clock.now += 100
        log.advance(5)
    assert lines[0] == "sweeping: 5 runs, 0.05 runs/s, 1 min 40 s elapsed"
    assert lines[-1] == "sweeping: 5 runs in 1 min 40 s (0.05 runs/s)"


def test_a_stage_without_a_count_ends_with_its_time():
    log, clock, lines = _log(500, description="reconstructing")
    with log:
        clock.now += 130
        log.tick()
    assert lines == [
        "reconstructing: 0/500 texts, 2 min 10 s elapsed",
        "reconstructing: done in 2 min 10 s",
    ]


def test_a_failed_stage_writes_no_closing_line():
    log, clock, lines = _log(10)
    with pytest.raises(KeyError), log:
        clock.now += 11
        log.tick()
        raise KeyError("boom")
    assert lines == ["embedding: 0/10 texts, 11 s elapsed"]


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("PRIVEMBED_PROGRESS_INTERVAL", raising=False)
    assert common.progress_interval() == common.PROGRESS_INTERVAL_S == 10.0
    monkeypatch.setenv("PRIVEMBED_PROGRESS_INTERVAL", "2.5")
    assert common.progress_interval() == 2.5
    monkeypatch.setenv("PRIVEMBED_PROGRESS_INTERVAL", "0")
    assert common.progress_interval() is None and not common.progress_reported()
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("PRIVEMBED_PROGRESS_INTERVAL", bad)
        with pytest.raises(ValueError, match=rf"PRIVEMBED_PROGRESS_INTERVAL={bad!r}"):
            common.progress_interval()
    with pytest.raises(ValueError, match="interval=0"):
        LogProgress("x", 1, unit="rows", interval=0)


def test_the_ticker_thread_ends_with_the_stage():
    log = LogProgress("x", 1, unit="rows", interval=10.0, write=lambda _line: None)
    with log:
        assert any(t.name == "progress" and t.is_alive() for t in threading.enumerate())
    assert log._thread is not None and not log._thread.is_alive()


@pytest.fixture
def lines(monkeypatch):
    """Progress lines of the helpers off a terminal, on a clock that moves 7 s per reading."""
    out: list[str] = []
    monkeypatch.setenv("PRIVEMBED_PROGRESS_INTERVAL", "10")
    monkeypatch.setattr(common, "show_progress", lambda: False)
    monkeypatch.setattr(
        common, "LogProgress", functools.partial(LogProgress, clock=Clock(7), write=out.append)
    )
    return out


def test_every_helper_writes_lines_off_a_terminal(lines):
    with common.progress_done("embedding", 30, unit="texts") as on_progress:
        for done in range(3, 31, 3):
            on_progress(done)
    assert lines and lines[-1].startswith("embedding: 30 texts in ")
    lines.clear()
    with common.progress_callback("protecting") as (set_total, advance):
        set_total(30)
        for _ in range(10):
            advance(3)
    assert any(ln.startswith("protecting: ") and "/30 rows" in ln for ln in lines), lines
    lines.clear()
    assert list(common.progress(range(10), total=10, description="scoring")) == list(range(10))
    assert lines and lines[-1].startswith("scoring: 10 rows in ")


def test_the_suite_writes_no_progress_lines(capsys):
    """tests/conftest.py sets PRIVEMBED_PROGRESS_INTERVAL=0: quick or not, nothing is written."""
    with common.progress_done("embedding", 3, unit="texts") as on_progress:
        on_progress(3)
    assert capsys.readouterr().err == ""


def test_protect_off_a_terminal_announces_and_reports(tmp_path, lines):
    """Through the command line: stderr (not a terminal under CliRunner) gets the lines."""
    X = np.random.default_rng(0).standard_normal((1_000, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    r = CliRunner().invoke(app, ["protect", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"),
                                 "-m", "laplace", "--epsilon", "20", "--batch-rows", "100"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert any(ln.startswith("protecting 1,000 rows: about ") for ln in lines), lines
    assert any("rows/s, about" in ln and "left" in ln for ln in lines), lines
    assert lines[-1].startswith("protecting: 1,000 rows in ")
