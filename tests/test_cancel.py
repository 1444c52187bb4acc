"""Cooperative cancellation (privembed.core.cancel): signals recorded, raised at checkpoints."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from privembed.core import cancel
from privembed.core.cancel import Cancelled, cancellable, cancelled, checkpoint

from . import _signals


@pytest.fixture(autouse=True)
def _python_sigint():
    """The tests send SIGINT: Python's handler, not what the runner inherited (tests/_signals.py)."""
    with _signals.python_sigint():
        yield


def test_a_signal_waits_for_the_next_checkpoint_and_a_second_one_stops_at_once():
    before = signal.getsignal(signal.SIGINT)
    with cancellable():
        signal.raise_signal(signal.SIGINT)  # recorded, not raised
        assert cancelled()
        checkpoint("commit.after", stop=False)  # a point where stopping would be wrong
        with pytest.raises(Cancelled) as info:
            checkpoint("batch.read")
        assert info.value.exit_code == 130
        with pytest.raises(Cancelled):  # the impatient second Ctrl-C
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before and not cancelled()
    with cancellable():
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(Cancelled) as info:
            checkpoint("batch.drawn")
        assert info.value.exit_code == 143 and isinstance(info.value, KeyboardInterrupt)


def test_a_signal_no_checkpoint_saw_is_forgotten_when_the_block_completes():
    with cancellable():
        signal.raise_signal(signal.SIGINT)
    assert not cancelled()
    checkpoint("batch.read")  # outside any block: nothing pending, nothing raised


def test_unknown_points_are_refused():
    with pytest.raises(ValueError, match=r"unknown checkpoint 'batch\.done'"):
        checkpoint("batch.done")


def test_other_threads_and_ignored_signals_are_left_alone():
    seen = []

    def worker():
        with cancellable():  # no handlers outside the main thread
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [signal.getsignal(signal.SIGINT)]
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shell's background job
    try:
        with cancellable():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_faults_are_injected_at_the_nth_visit(monkeypatch):
    monkeypatch.setenv("PRIVEMBED_FAULT_AT", "batch.drawn#3:SIGTERM")
    with cancellable():
        for _ in range(2):
            checkpoint("batch.drawn")
            checkpoint("batch.read")
        with pytest.raises(Cancelled) as info:
            checkpoint("batch.drawn")
        assert info.value.signum == signal.SIGTERM
    monkeypatch.setenv("PRIVEMBED_FAULT_AT", "batch.read:SIGINT")
    assert cancel._state.fault_counts == {"batch.drawn": 3}
    with cancellable(), pytest.raises(Cancelled):
        checkpoint("batch.read")


_CONSOLE = """
import os, signal, sys
from privembed.core.cancel import cancellable, checkpoint, run_console

class Teardown:  # sends SIGTERM from the interpreter's teardown, where a late kill may land
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)

def main():
    with cancellable():
        if sys.argv[1] == "published":
            checkpoint("publish.after", stop=False)
    if sys.argv[2] != "-":
        signal.raise_signal(signal.Signals[sys.argv[2]])  # while the command prints its summary
    print("summary", flush=True)

teardown = Teardown()
sys.exit(run_console(main))
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_after_publication_ends_the_console_with_its_status_and_one_line(sig):
    """The issue: a signal after the output was published ended ``privembed protect`` by the
    signal itself (-15/-2) with no message -- the release's handlers were gone, and the
    interpreter's teardown restores the default disposition. Under :func:`run_console` it is
    recorded wherever it lands after the publication, the command's output is not cut short,
    and the process ends with 128 + signal and one line saying the output is complete."""
    r = _signals.run([sys.executable, "-c", _CONSOLE, "published", sig], capture_output=True,
                     text=True, timeout=120)  # fmt: skip
    word = "interrupted" if sig == "SIGINT" else "terminated"
    assert r.returncode == 128 + signal.Signals[sig], (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [f"{word}: the output was published and is complete"]
    assert r.stdout == "summary\n"


def test_the_console_never_dies_by_a_signal_in_the_interpreters_teardown():
    """With a published release the process ends before the teardown (0: no signal came in
    time); without one a signal in the teardown is ignored: the command's status stands."""
    for published in ("published", "none"):
        r = _signals.run([sys.executable, "-c", _CONSOLE, published, "-"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
        assert (r.returncode, r.stdout, r.stderr) == (0, "summary\n", ""), published
