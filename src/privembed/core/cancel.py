"""Cooperative cancellation: a signal asks a release to stop; the release stops where it is safe.

A SIGINT or SIGTERM that raises an exception wherever the interpreter happens to be can land
inside a C extension's lazy import (leaving a half-initialised module: the next import then
fails with an unrelated error), between a ledger commit and the rename that publishes its
output, or inside a clean-up. So while a command releases under :func:`cancellable`, the first
SIGINT or SIGTERM only records itself. The release checks at named points -- batch boundaries,
before the ledger commit, every wait for another process's ledger lock (:data:`POINTS`) -- and
raises :class:`Cancelled` there, so everything it opened is cleaned up on the way out and the
command line prints one line and exits with ``128 + signal`` (130 for Ctrl-C). A second signal
of the same kind interrupts at once: an impatient user is never stuck.

Between the ledger commit and the rename both signals are also *blocked*
(:func:`privembed.data.io.atomic_output`): a commit and its publication happen together.

Fault injection
---------------
Tests name a point and a signal, and the process sends itself that signal the n-th time it
reaches the point::

    PRIVEMBED_FAULT_AT="batch.drawn#2:SIGINT"   # the second batch, after its noise was drawn

(``SIGKILL`` kills outright, as a crash would). Every outcome is then deterministic: no test
waits a wall-clock fraction of a run, which a busy machine stretches.

Examples
--------
>>> with cancellable():
...     checkpoint("batch.read")     # no signal arrived: nothing happens
>>> cancelled()
False
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["POINTS", "Cancelled", "cancellable", "cancelled", "checkpoint", "cooperative"]

#: the named points where a release checks for a pending signal (and tests inject faults)
POINTS: dict[str, str] = {
    "startup": "the entry point, before the command line's own modules are imported",
    "command.start": "a releasing command has read its options; nothing is open yet",
    "output.opened": "the temporary output file exists (nothing published)",
    "batch.read": "a batch was read from the input",
    "batch.drawn": "a batch's noise was drawn and its records staged",
    "batch.written": "a batch went to the temporary output, the store or stdout",
    "commit.before": "every batch is done; the ledger commit is next",
    "ledger.wait": "one more wait for another process's ledger lock",
    "commit.after": "the ledger committed the release; signals are held until the rename",
    "publish.after": "the output was renamed into place: the release is complete",
}

_FAULT_ENV = "PRIVEMBED_FAULT_AT"
_HANDLED = (signal.SIGINT, signal.SIGTERM)


class Cancelled(KeyboardInterrupt):
    """A release stopped at a checkpoint because SIGINT or SIGTERM arrived.

    A :class:`KeyboardInterrupt`, so every ``except KeyboardInterrupt`` clean-up runs;
    :attr:`exit_code` is what the command line exits with (``128 + signal``).
    """

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        self.fault_spec: str | None = None
        self.fault_counts: dict[str, int] = {}


_state = _State()


def _handler(signum: int, frame: Any) -> None:
    if _state.pending == signum:  # the second signal of the same kind: stop now
        raise Cancelled(signum)
    if _state.pending is None:
        _state.pending = signum


@contextlib.contextmanager
def cancellable() -> Iterator[None]:
    """Run a block with SIGINT/SIGTERM recorded instead of raised (see the module docs).

    Re-entrant; a no-op outside the main thread (signal handlers belong to the main thread).
    On exit the previous handlers are restored and a signal that no checkpoint saw is
    forgotten: the block ran to completion.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _state.depth:
        _state.depth += 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    old = {s: signal.getsignal(s) for s in _HANDLED}
    for s in _HANDLED:
        if old[s] is not signal.SIG_IGN:  # a shell's background job ignores SIGINT: keep that
            signal.signal(s, _handler)
    _state.depth = 1
    _state.pending = None
    try:
        yield
    finally:
        _state.depth = 0
        _state.pending = None
        for s, h in old.items():
            signal.signal(s, h)


def cooperative(func: F) -> F:
    """Decorator: run ``func`` under :func:`cancellable` (a release front end)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with cancellable():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def cancelled() -> bool:
    """Whether a signal is waiting for the next checkpoint."""
    return _state.pending is not None


def checkpoint(name: str, *, stop: bool = True) -> None:
    """A named point where a release may stop: raise :class:`Cancelled` if a signal arrived.

    ``stop=False`` marks a point where stopping would be wrong (signals are held between the
    ledger commit and the rename; after the rename the release is complete): faults can be
    injected there, and a pending signal waits.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`POINTS`.
    Cancelled
        SIGINT or SIGTERM arrived since the block began.
    """
    if name not in POINTS:
        raise ValueError(f"unknown checkpoint {name!r}; known: {', '.join(POINTS)}.")
    _inject(name)
    sig = _state.pending
    if stop and sig is not None and threading.current_thread() is threading.main_thread():
        raise Cancelled(sig)


def _inject(name: str) -> None:
    """Send the fault named in ``PRIVEMBED_FAULT_AT`` when its point is reached (tests)."""
    spec = os.environ.get(_FAULT_ENV)
    if not spec:
        return
    if spec != _state.fault_spec:
        _state.fault_spec = spec
        _state.fault_counts = {}
    where, _, signame = spec.rpartition(":")
    point, _, nth = where.partition("#")
    if point != name:
        return
    count = _state.fault_counts.get(name, 0) + 1
    _state.fault_counts[name] = count
    if count != (int(nth) if nth else 1):
        return
    sig = signal.Signals[signame]
    if sig == signal.SIGKILL:
        os.kill(os.getpid(), signal.SIGKILL)
    signal.raise_signal(sig)
