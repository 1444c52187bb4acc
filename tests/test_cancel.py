"""Cooperative cancellation (privembed.core.cancel): signals recorded, raised at checkpoints."""

from __future__ import annotations

import signal
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
