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

After the rename (the point ``publish.after``) the release is complete, and a signal can only
end the process, never undo the release. The console script (:func:`run_console`) then records
SIGINT/SIGTERM until it exits -- never raising them into the command's remaining output, and
never leaving them to the interpreter's teardown, which puts a Python handler back to the
default disposition and would let the signal kill the process silently (status -15/-2) -- and
ends with ``128 + signal`` and one line saying the output was published and is complete
(``interrupted: the output was published and is complete``). A signal that stops a release
before its rename prints the usual ``interrupted``/``terminated``.

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

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "POINTS",
    "Cancelled",
    "cancellable",
    "cancelled",
    "checkpoint",
    "cooperative",
    "run_console",
]

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
    "command.end": "the console script's command returned; its exit status is settled next",
}
#: the point after which a release is complete (its output renamed into place)
_COMPLETE = "publish.after"

_FAULT_ENV = "PRIVEMBED_FAULT_AT"
_HANDLED = (signal.SIGINT, signal.SIGTERM)


class Cancelled(KeyboardInterrupt):
    """A release stopped at a checkpoint because SIGINT or SIGTERM arrived.

    A :class:`KeyboardInterrupt`, so every ``except KeyboardInterrupt`` clean-up runs;
    :attr:`exit_code` is what the command line exits with (``128 + signal``).
    """

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        #: whether the release had already published its output (``publish.after``)
        self.published = _state.published
        super().__init__(signal.Signals(self.signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        """The one line the command line prints: ``interrupted`` (SIGINT) or ``terminated``,
        and whether the output was already published and complete."""
        return _message(self.signum, self.published)


def _message(signum: int, published: bool) -> str:
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    return f"{word}: the output was published and is complete" if published else word


class _State:
    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        self.fault_spec: str | None = None
        self.fault_counts: dict[str, int] = {}
        #: the release of the current (or last) block published its output
        self.published = False
        #: :func:`run_console` owns the process: signals after publication are recorded
        self.console = False
        #: the first signal recorded after publication (reported by :func:`run_console`)
        self.late: int | None = None


_state = _State()


def _handler(signum: int, frame: Any) -> None:
    if _state.pending == signum:  # the second signal of the same kind: stop now
        raise Cancelled(signum)
    if _state.pending is None:
        _state.pending = signum


def _record_late(signum: int, frame: Any) -> None:
    """After publication (console script): remember the signal; :func:`run_console` ends."""
    if _state.late is None:
        _state.late = signum


@contextlib.contextmanager
def cancellable() -> Iterator[None]:
    """Run a block with SIGINT/SIGTERM recorded instead of raised (see the module docs).

    Re-entrant; a no-op outside the main thread (signal handlers belong to the main thread).
    On exit the previous handlers are restored and a signal that no checkpoint saw is
    forgotten: the block ran to completion. Under :func:`run_console`, once the block's release
    has published its output, such a signal -- and any later one -- is recorded instead, and
    the process ends with its status (see the module docs).
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
    _state.published = False
    completed = False
    try:
        yield
        completed = True
    finally:
        _state.depth = 0
        held, _state.pending = _state.pending, None
        after = _state.console and _state.published  # complete: nothing left to stop
        if after and completed and held is not None and _state.late is None:
            _state.late = held
        _state.published = after  # (kept for run_console only)
        for s, h in old.items():
            signal.signal(s, _record_late if after and h is not signal.SIG_IGN else h)


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
    injected there, and a pending signal waits. Reaching ``publish.after`` marks the block's
    release as published (:attr:`Cancelled.published`).

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`POINTS`.
    Cancelled
        SIGINT or SIGTERM arrived since the block began.
    """
    if name not in POINTS:
        raise ValueError(f"unknown checkpoint {name!r}; known: {', '.join(POINTS)}.")
    main = threading.current_thread() is threading.main_thread()
    if name == _COMPLETE and main and _state.depth:
        _state.published = True
    _inject(name)
    sig = _state.pending
    if stop and sig is not None and main:
        raise Cancelled(sig)


def run_console(main: Callable[[], object]) -> Any:
    """Run the console script's ``main``; return the status to exit with, or end the process.

    After a release published its output and ``main`` succeeded, the process ends here, once
    the ``atexit`` callbacks have run and stdout and stderr are flushed (:func:`os._exit`: the
    interpreter's teardown, which has nothing left to do for a finished release, is where such
    a signal used to land -- it puts Python's handlers back to the default disposition, and the
    process died by the signal, -15 or -2, with no message): with 0, or, if a SIGINT/SIGTERM
    arrived after the publication -- recorded, never raised (:func:`cancellable`), up to this
    very end -- with ``128 + signal`` and one line on stderr saying the output was published
    and is complete.

    Otherwise ``main``'s own status is returned (its :class:`SystemExit` code, 0 if it
    returns), with SIGINT and SIGTERM ignored from then on, through the teardown. A disposition
    the process inherited as ignored (a background job's SIGINT) stays ignored throughout.
    """
    _state.console = True
    watched = [s for s in _HANDLED if signal.getsignal(s) is not signal.SIG_IGN]
    try:
        main()
        status: Any = 0
    except SystemExit as exc:
        status = exc.code
    for s in watched:  # from here on a signal is recorded, whatever the command left
        signal.signal(s, _record_late)
    checkpoint("command.end", stop=False)
    complete = _state.published and status in (0, None)
    if complete:  # what the interpreter's exit would still do that matters
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    mask, arrived = _block(watched)
    late = _state.late if _state.late is not None else (arrived[0] if arrived else None)
    if complete:
        if late is not None:
            os.write(2, (_message(late, True) + "\n").encode())
        os._exit(0 if late is None else 128 + int(late))
    for s in watched:  # (ignoring discards a blocked pending one too)
        signal.signal(s, signal.SIG_IGN)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return status


def _block(watched: list[signal.Signals]) -> tuple[Any, list[signal.Signals]]:
    """Block SIGINT/SIGTERM (this thread); return the old mask and which ``watched`` signals
    arrived meanwhile (blocked before their handler could record them)."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - no POSIX signal masks
        return None, []
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_HANDLED))
    return mask, sorted(signal.sigpending() & set(watched))


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
